//! kcm-yaml-docs: the documents of a manifest file as `kcm-rs explain`
//! and `kcm-rs lint` read them (YAML or JSON, one or many documents,
//! `List`s flattened into their items, empty documents dropped).
//!
//! Layout: this file only. It is a library (not in the binary) so that the
//! fuzz targets (`crates/fuzz`) reach the same code the tools run.
//!
//! Bounds on hostile input: serde_yaml_ng refuses nesting deeper than 128
//! levels and alias expansion beyond its repetition limit, so neither the
//! parse nor [`documents`]' walk over `List`s can exhaust the stack or
//! memory. Its scanner (libyaml's) is quadratic in the depth of flow
//! collections, though (fuzzing found 200 KB of `{a: [` taking 155 s), so
//! text whose `[`/`{` nesting exceeds [`MAX_FLOW_DEPTH`] is refused before
//! it is parsed; such text would fail the 128-level limit anyway.

use serde_json::Value;

/// Deeper `[`/`{` nesting than this is refused unparsed.
pub const MAX_FLOW_DEPTH: usize = 256;

/// Why a manifest could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// serde_yaml_ng's message.
    #[error(transparent)]
    Yaml(#[from] serde_yaml_ng::Error),
    #[error("`[`/`{{` nested more than {MAX_FLOW_DEPTH} levels deep (line {line})")]
    TooDeep { line: usize },
}

/// Every document of `text`, `List`s (a `kind` ending in `List` with an
/// `items` array) flattened into their items.
pub fn documents(text: &str) -> Result<Vec<Value>, ManifestError> {
    check_flow_depth(text)?;
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        flatten(v, &mut out);
    }
    Ok(out)
}

/// Refuses `[`/`{` nesting deeper than [`MAX_FLOW_DEPTH`], in one pass.
/// Brackets in comments and in the line's part of a quoted string (one
/// opened after a space or an indicator) do not count; elsewhere (plain
/// and block scalars, a quoted string's further lines) they do, which
/// over-counts only: a scalar would need hundreds of unclosed brackets to
/// be refused. Quoted strings end at the line's end here so that a quote
/// inside a plain scalar cannot hide real nesting on the lines after it.
fn check_flow_depth(text: &str) -> Result<(), ManifestError> {
    let (mut depth, mut line) = (0usize, 1);
    let mut bytes = text.bytes().peekable();
    let mut prev = b'\n';
    while let Some(b) = bytes.next() {
        match b {
            b'\n' => line += 1,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_FLOW_DEPTH {
                    return Err(ManifestError::TooDeep { line });
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'#' if prev.is_ascii_whitespace() => while bytes.next_if(|&c| c != b'\n').is_some() {},
            b'"' | b'\'' if prev.is_ascii_whitespace() || b"[{,:-".contains(&prev) => {
                // '' is a quote in single quotes, \ escapes in double ones.
                while let Some(c) = bytes.next_if(|&c| c != b'\n') {
                    if c == b'\\' && b == b'"' {
                        bytes.next_if(|&c| c != b'\n');
                    } else if c == b && !(b == b'\'' && bytes.next_if_eq(&b'\'').is_some()) {
                        break;
                    }
                }
            }
            _ => {}
        }
        prev = b;
    }
    Ok(())
}

fn flatten(v: Value, out: &mut Vec<Value>) {
    if v.is_null() {
        return;
    }
    let is_list = v["kind"].as_str().is_some_and(|k| k.ends_with("List")) && v["items"].is_array();
    if is_list {
        if let Value::Object(mut m) = v
            && let Some(Value::Array(items)) = m.remove("items")
        {
            for i in items {
                flatten(i, out);
            }
        }
    } else {
        out.push(v);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn documents_lists_and_json() {
        let text = "kind: Job\n---\n---\nkind: List\nitems:\n- kind: Pod\n- {kind: PodList, items: [{kind: Pod}]}\n";
        let kinds: Vec<_> = documents(text)
            .unwrap()
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(kinds, ["Job", "Pod", "Pod"]);
        assert_eq!(documents(r#"{"kind": "Job"}"#).unwrap().len(), 1);
        assert!(documents("kind: [").is_err());
    }

    #[test]
    fn flow_depth_counts_brackets_outside_strings_and_comments() {
        let deep = "[".repeat(MAX_FLOW_DEPTH + 1);
        assert!(matches!(
            documents(&format!("a: 1\nb: {deep}")),
            Err(ManifestError::TooDeep { line: 2 })
        ));
        let quoted = format!(
            "a: \"{deep}\\\"{deep}\"\nb: '{deep}''{deep}'\nc: 1 # {deep}\nd: [[x]]\ne: x'{deep}'\n"
        );
        assert!(matches!(
            documents(&quoted),
            Err(ManifestError::TooDeep { line: 5 })
        ));
        // A quote inside a plain scalar hides nothing on the next line.
        let hidden = format!("a: x '\nb: {deep}");
        assert!(matches!(
            documents(&hidden),
            Err(ManifestError::TooDeep { line: 2 })
        ));
        let fine = quoted.replace("e: x", "e: ");
        assert_eq!(documents(&fine).unwrap()[0]["d"][0][0], "x");
    }

    /// The fuzzing finding: libyaml's scanner is quadratic in flow depth
    /// (200 KB of `{a: [` took 155 s); refused before parsing now.
    #[test]
    fn deep_flow_nesting_is_refused_fast() {
        for open in ["{a: [", "{\"a\":", "a: {", "["] {
            let text = open.repeat(40_000);
            let start = std::time::Instant::now();
            assert!(matches!(
                documents(&text),
                Err(ManifestError::TooDeep { .. })
            ));
            assert!(
                start.elapsed() < std::time::Duration::from_secs(1),
                "{open}"
            );
        }
    }

    #[test]
    fn deep_nesting_and_alias_bombs_are_errors() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(documents(&deep).is_err());
        let lists = "{kind: List, items: [".repeat(10_000);
        assert!(documents(&lists).is_err());
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..9 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("b{}", i - 1)
            };
            bomb += &format!(
                "b{i}: &b{i} [{}]\n",
                vec![format!("*{prev}"); 10].join(", ")
            );
        }
        assert!(documents(&bomb).is_err());
    }
}
