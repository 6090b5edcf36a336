use super::*;

#[test]
fn reads_fields_in_order_with_every_wire_type() {
    let mut msg = Writer::new()
        .varint(1, 150)
        .bytes(2, "hello")
        .varint(3, -7)
        .finish();
    msg.extend([(4 << 3) | 1, 1, 0, 0, 0, 0, 0, 0, 0]); // fixed64 = 1
    msg.extend([(5 << 3) | 5, 2, 0, 0, 0]); // fixed32 = 2
    let mut r = Reader::new(&msg);
    assert_eq!(r.next().expect("ok"), Some((1, Value::Varint(150))));
    let (f, v) = r.next().expect("ok").expect("field");
    assert_eq!((f, v.str(f).expect("ok").as_ref()), (2, "hello"));
    let (f, v) = r.next().expect("ok").expect("field");
    assert_eq!((v.int32(f).expect("ok"), v.int64(f).expect("ok")), (-7, -7));
    assert_eq!(r.next().expect("ok"), Some((4, Value::Fixed64(1))));
    assert_eq!(r.next().expect("ok"), Some((5, Value::Fixed32(2))));
    assert_eq!(r.next().expect("ok"), None);
}

#[test]
fn bad_bytes_are_errors_not_panics() {
    // A length beyond the end, a varint cut short, an overlong varint, a
    // group wire type and field number 0.
    let cases: [(&[u8], ProtoError); 5] = [
        (&[(1 << 3) | 2, 5, b'a'], ProtoError::Truncated),
        (&[1 << 3, 0x80], ProtoError::Truncated),
        (
            &[
                1 << 3,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                0xff,
                1,
            ],
            ProtoError::VarintOverflow,
        ),
        (&[(1 << 3) | 3], ProtoError::WireType(3)),
        (&[0, 1], ProtoError::FieldZero),
    ];
    for (bytes, want) in cases {
        let mut r = Reader::new(bytes);
        assert_eq!(r.next(), Err(want), "{bytes:?}");
    }
    let one = Writer::new().varint(1, 1).finish();
    let (f, v) = Reader::new(&one).next().expect("ok").expect("field");
    assert!(matches!(
        v.bytes(f),
        Err(ProtoError::Unexpected { field: 1, .. })
    ));
}

#[test]
fn invalid_utf8_is_replaced_not_refused() {
    let msg = Writer::new().bytes(1, [b'a', 0xff]).finish();
    let (f, v) = Reader::new(&msg).next().expect("ok").expect("field");
    assert_eq!(v.str(f).expect("ok"), "a\u{fffd}");
}

#[test]
fn envelope_unwraps_and_refuses_what_it_cannot_read() {
    let inner = Writer::new().bytes(1, "x");
    let wrapped = inner.clone().enveloped();
    assert_eq!(
        unwrap_envelope(&wrapped).expect("ok"),
        inner.finish().as_slice()
    );
    assert_eq!(unwrap_envelope(b"{\"kind\":1}"), Err(ProtoError::NoMagic));
    let mut gz = MAGIC.to_vec();
    gz.extend(Writer::new().bytes(2, "raw").bytes(3, "gzip").finish());
    assert_eq!(
        unwrap_envelope(&gz),
        Err(ProtoError::ContentEncoding("gzip".into()))
    );
}

#[test]
fn list_body_gives_resource_version_continue_and_items() {
    let list = Writer::new()
        .message(1, Writer::new().bytes(2, "42").bytes(3, "next"))
        .bytes(2, "a")
        .bytes(2, "bc")
        .finish();
    let body = ListBody::parse(&list).expect("ok");
    assert_eq!(body.resource_version, "42");
    assert_eq!(body.continue_token, "next");
    assert_eq!(body.items, vec![b"a".as_slice(), b"bc".as_slice()]);
}

#[test]
fn watch_frames_parse_to_type_and_unwrapped_object() {
    let frame = watch_frame("MODIFIED", Writer::new().bytes(1, "pod"));
    let len = read_frame_len(&frame).expect("ok");
    assert_eq!(len, frame.len() - 4);
    assert_eq!(read_frame_len(&frame[..3]), None);
    let ev = WatchEvent::parse(&frame[4..]).expect("ok");
    assert_eq!(ev.type_, WatchEventType::Modified);
    assert_eq!(ev.object, Writer::new().bytes(1, "pod").finish().as_slice());
    for (name, want) in [
        ("ADDED", WatchEventType::Added),
        ("DELETED", WatchEventType::Deleted),
        ("BOOKMARK", WatchEventType::Bookmark),
        ("ERROR", WatchEventType::Error),
    ] {
        let f = watch_frame(name, Writer::new());
        assert_eq!(WatchEvent::parse(&f[4..]).expect("ok").type_, want);
    }
    let f = watch_frame("WHAT", Writer::new());
    assert_eq!(
        WatchEvent::parse(&f[4..]).map(|e| e.type_),
        Err(ProtoError::EventType("WHAT".into()))
    );
}

#[test]
fn messages_without_their_payload_are_errors_not_empty_objects() {
    // A bare magic would otherwise read as an empty list, and a frame
    // without an object as an object with no name.
    assert_eq!(
        unwrap_envelope(MAGIC),
        Err(ProtoError::Missing("runtime.Unknown raw"))
    );
    let no_object = Writer::new().bytes(1, "ADDED").finish();
    assert_eq!(
        WatchEvent::parse(&no_object).map(|e| e.type_),
        Err(ProtoError::Missing("watch event object"))
    );
    assert_eq!(
        WatchEvent::parse(&[]).map(|e| e.type_),
        Err(ProtoError::Missing("watch event type"))
    );
}

#[test]
fn a_tenth_varint_byte_holds_only_the_top_bit() {
    let mut max = vec![1 << 3];
    max.extend([0xff; 9]);
    max.push(1);
    let (_, v) = Reader::new(&max).next().expect("ok").expect("field");
    assert_eq!(v, Value::Varint(u64::MAX));
    let mut over = max.clone();
    *over.last_mut().expect("byte") = 0x7f;
    assert_eq!(Reader::new(&over).next(), Err(ProtoError::VarintOverflow));
}

#[test]
fn status_reads_code_reason_and_message() {
    let msg = Writer::new()
        .bytes(2, "Failure")
        .bytes(3, "too old resource version: 1 (5)")
        .bytes(4, "Expired")
        .varint(6, 410)
        .finish();
    let s = Status::parse(&msg).expect("ok");
    assert_eq!(s.code, 410);
    assert_eq!(s.reason, "Expired");
    assert_eq!(s.status, "Failure");
    assert!(s.message.starts_with("too old"));
}

#[test]
fn frames_split_only_when_whole_and_a_huge_prefix_is_refused_at_once() {
    let frame = watch_frame("ADDED", Writer::new().bytes(1, "pod"));
    let mut stream = frame.clone();
    stream.extend_from_slice(&frame[..5]);
    let (payload, used) = next_frame(&stream, 1 << 20).expect("ok").expect("whole");
    assert_eq!((payload, used), (&frame[4..], frame.len()));
    assert_eq!(next_frame(&stream[used..], 1 << 20), Ok(None));
    assert_eq!(next_frame(&[0, 0], 1 << 20), Ok(None));
    // A prefix claiming 4 GiB: refused with 4 bytes in hand, not awaited.
    let huge = [0xff, 0xff, 0xff, 0xff];
    assert_eq!(
        next_frame(&huge, 16 << 20),
        Err(ProtoError::FrameTooLarge(u32::MAX as usize))
    );
    assert_eq!(next_frame(&huge, usize::MAX), Ok(None));
    assert_eq!(next_frame(&[0, 0, 0, 0], 0), Ok(Some((&[][..], 4))));
}

#[test]
fn bookmarks_give_their_version_and_the_initial_events_end_mark() {
    let entry = |k: &str, v: &str| Writer::new().bytes(1, k).bytes(2, v);
    let marked = Writer::new()
        .message(
            1,
            Writer::new()
                .bytes(6, "42")
                .message(12, entry("other", "true"))
                .message(12, entry("k8s.io/initial-events-end", "true")),
        )
        .finish();
    let key = "k8s.io/initial-events-end";
    assert_eq!(bookmark(&marked, key), Ok(("42".to_string(), true)));
    let plain = Writer::new()
        .message(
            1,
            Writer::new()
                .bytes(6, "43")
                .message(12, entry(key, "false")),
        )
        .finish();
    assert_eq!(bookmark(&plain, key), Ok(("43".to_string(), false)));
    assert_eq!(bookmark(&[], key), Ok((String::new(), false)));
    assert!(bookmark(&[0x0a, 0x05, 0x32], key).is_err());
}
