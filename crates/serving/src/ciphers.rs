//! `--tls-min-version` and `--tls-cipher-suites` as KCM reads them
//! (k8s.io/component-base/cli/flag: Go's crypto/tls suite names, its two
//! legacy ChaCha20 aliases, and `VersionTLS10`..`VersionTLS13`), mapped onto
//! what rustls implements.
//!
//! rustls has no TLS 1.0/1.1 and only ECDHE AEAD suites, so:
//! * `VersionTLS10`/`VersionTLS11` are accepted and serve TLS 1.2+ (a subset
//!   of what the flag allows);
//! * a known name rustls does not implement (RSA key exchange, CBC, 3DES,
//!   RC4) is accepted and skipped with a warning, so a hardened KCM command
//!   line still starts; unknown names are refused;
//! * as in Go, the list picks TLS 1.2 suites only: TLS 1.3 suites are
//!   always on.

use std::fmt;

/// The lowest TLS version served.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MinVersion {
    /// `VersionTLS10`, `VersionTLS11` or `VersionTLS12` (the default).
    #[default]
    Tls12,
    Tls13,
}

/// `--tls-min-version`: empty is the default (TLS 1.2, as KCM).
pub fn parse_min_version(s: &str) -> Result<MinVersion, String> {
    match s {
        "" | "VersionTLS10" | "VersionTLS11" | "VersionTLS12" => Ok(MinVersion::Tls12),
        "VersionTLS13" => Ok(MinVersion::Tls13),
        other => Err(format!(
            "unknown tls version {other:?} (possible values: VersionTLS10, VersionTLS11, \
             VersionTLS12, VersionTLS13)"
        )),
    }
}

/// A cipher suite name `--tls-cipher-suites` accepts, with its IANA number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CipherSuite {
    pub name: &'static str,
    pub id: u16,
    /// In Go's `tls.InsecureCipherSuites()` (KCM warns about these).
    pub insecure: bool,
}

impl fmt::Display for CipherSuite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

const fn suite(name: &'static str, id: u16, insecure: bool) -> CipherSuite {
    CipherSuite { name, id, insecure }
}

/// Every name KCM accepts (Go's secure and insecure lists and the legacy
/// aliases), with IANA numbers.
pub const KNOWN: &[CipherSuite] = &[
    suite("TLS_AES_128_GCM_SHA256", 0x1301, false),
    suite("TLS_AES_256_GCM_SHA384", 0x1302, false),
    suite("TLS_CHACHA20_POLY1305_SHA256", 0x1303, false),
    suite("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", 0xc009, false),
    suite("TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", 0xc00a, false),
    suite("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", 0xc013, false),
    suite("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", 0xc014, false),
    suite("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", 0xc02b, false),
    suite("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", 0xc02c, false),
    suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", 0xc02f, false),
    suite("TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", 0xc030, false),
    suite("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", 0xcca8, false),
    suite(
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        0xcca9,
        false,
    ),
    suite("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305", 0xcca8, false),
    suite("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305", 0xcca9, false),
    suite("TLS_RSA_WITH_RC4_128_SHA", 0x0005, true),
    suite("TLS_RSA_WITH_3DES_EDE_CBC_SHA", 0x000a, true),
    suite("TLS_RSA_WITH_AES_128_CBC_SHA", 0x002f, true),
    suite("TLS_RSA_WITH_AES_256_CBC_SHA", 0x0035, true),
    suite("TLS_RSA_WITH_AES_128_CBC_SHA256", 0x003c, true),
    suite("TLS_RSA_WITH_AES_128_GCM_SHA256", 0x009c, true),
    suite("TLS_RSA_WITH_AES_256_GCM_SHA384", 0x009d, true),
    suite("TLS_ECDHE_ECDSA_WITH_RC4_128_SHA", 0xc007, true),
    suite("TLS_ECDHE_RSA_WITH_RC4_128_SHA", 0xc011, true),
    suite("TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA", 0xc012, true),
    suite("TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256", 0xc023, true),
    suite("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256", 0xc027, true),
];

/// One `--tls-cipher-suites` entry; unknown names are refused with
/// component-base's wording.
pub fn parse_cipher_suite(name: &str) -> Result<CipherSuite, String> {
    KNOWN
        .iter()
        .find(|s| s.name == name.trim())
        .copied()
        .ok_or_else(|| format!("Cipher suite {name} not supported or doesn't exist"))
}

/// rustls's suites for `wanted` (empty: rustls's defaults): the TLS 1.2
/// suites named, in the given order, then every TLS 1.3 suite. Named
/// suites rustls lacks are returned as the second value, for a warning.
pub fn select(
    available: &[rustls::SupportedCipherSuite],
    wanted: &[CipherSuite],
) -> (Vec<rustls::SupportedCipherSuite>, Vec<CipherSuite>) {
    if wanted.is_empty() {
        return (available.to_vec(), Vec::new());
    }
    let is13 =
        |s: &rustls::SupportedCipherSuite| matches!(s, rustls::SupportedCipherSuite::Tls13(_));
    let mut chosen: Vec<rustls::SupportedCipherSuite> = Vec::new();
    let mut missing = Vec::new();
    for w in wanted {
        let found = available
            .iter()
            .find(|s| !is13(s) && u16::from(s.suite()) == w.id);
        match found {
            Some(s) if !chosen.contains(s) => chosen.push(*s),
            Some(_) => {}
            // TLS 1.3 names are not configurable (as in Go): always on.
            None if (0x1301..=0x1303).contains(&w.id) => {}
            None => missing.push(*w),
        }
    }
    chosen.extend(available.iter().filter(|s| is13(s)).copied());
    (chosen, missing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_versions_as_component_base() {
        assert_eq!(parse_min_version(""), Ok(MinVersion::Tls12));
        assert_eq!(parse_min_version("VersionTLS10"), Ok(MinVersion::Tls12));
        assert_eq!(parse_min_version("VersionTLS13"), Ok(MinVersion::Tls13));
        assert!(parse_min_version("TLS13").is_err());
        let s = parse_cipher_suite("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305").expect("alias");
        assert_eq!(s.id, 0xcca8);
        assert!(parse_cipher_suite("TLS_RSA_WITH_AES_128_GCM_SHA256").is_ok_and(|s| s.insecure));
        let e = parse_cipher_suite("TLS_NOPE").expect_err("unknown");
        assert_eq!(e, "Cipher suite TLS_NOPE not supported or doesn't exist");
    }

    #[test]
    fn selection_keeps_tls13_and_reports_what_rustls_lacks() {
        let all = rustls::crypto::ring::default_provider().cipher_suites;
        let (chosen, missing) = select(&all, &[]);
        assert_eq!(chosen.len(), all.len());
        assert!(missing.is_empty());
        let want = [
            parse_cipher_suite("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").expect("known"),
            parse_cipher_suite("TLS_RSA_WITH_AES_128_GCM_SHA256").expect("known"),
            parse_cipher_suite("TLS_AES_128_GCM_SHA256").expect("known"),
        ];
        let (chosen, missing) = select(&all, &want);
        let tls12: Vec<u16> = chosen
            .iter()
            .filter(|s| matches!(s, rustls::SupportedCipherSuite::Tls12(_)))
            .map(|s| u16::from(s.suite()))
            .collect();
        assert_eq!(tls12, [0xc02f]);
        assert_eq!(
            chosen.len(),
            4,
            "one TLS 1.2 suite and the three TLS 1.3 ones"
        );
        assert_eq!(missing, [want[1]]);
    }
}
