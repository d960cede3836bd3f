//! Digests for telemetry: what a span may say of model-written source, arguments and results
//! without saying what they are (two equal ones show as equal).

use sha2::{Digest, Sha256};

/// The SHA-256 of `text`, in lower-case hex.
pub(crate) fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn it_is_the_sha256_of_the_text() {
        assert_eq!(
            super::sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
