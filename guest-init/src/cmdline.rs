//! Decoding what hvsim puts on the kernel command line.

/// Decodes lowercase or uppercase hex into a UTF-8 string.
pub fn decode_hex(hex: &str) -> Option<String> {
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        assert_eq!(decode_hex("6563686f206869").as_deref(), Some("echo hi"));
        assert_eq!(decode_hex("").as_deref(), Some(""));
        assert_eq!(decode_hex("6"), None);
        assert_eq!(decode_hex("zz"), None);
        assert_eq!(decode_hex("ff"), None, "not UTF-8");
    }
}
