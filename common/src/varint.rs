//! LEB128 unsigned varints (as protobuf writes them): the counter's spill
//! runs and the encoded corpus store ids, lengths and counts with them.

/// Appends `v` as a varint.
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint from the front of `buf`, advancing it; None if `buf`
/// ends inside it or it is longer than 10 bytes.
#[inline]
pub fn take(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for (i, &b) in buf.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *buf = &buf[i + 1..];
            return Some(v);
        }
    }
    None
}

/// Reads a varint from a reader; Ok(None) at a clean end of input.
pub fn read(r: &mut impl std::io::BufRead) -> std::io::Result<Option<u64>> {
    let mut v = 0u64;
    for i in 0..10 {
        let byte = {
            let buf = r.fill_buf()?;
            match buf.first() {
                Some(&b) => b,
                None if i == 0 => return Ok(None),
                None => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the input ends inside a varint",
                    ))
                }
            }
        };
        r.consume(1);
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            return Ok(Some(v));
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "a varint longer than 10 bytes",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_truncation() {
        let values = [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as u64,
            u64::MAX,
        ];
        let mut buf = Vec::new();
        for &v in &values {
            put(&mut buf, v);
        }
        let mut s = buf.as_slice();
        for &v in &values {
            assert_eq!(take(&mut s), Some(v));
        }
        assert!(s.is_empty());
        let mut r = std::io::Cursor::new(buf.clone());
        for &v in &values {
            assert_eq!(read(&mut r).expect("read"), Some(v));
        }
        assert_eq!(read(&mut r).expect("clean end"), None);
        let mut cut: &[u8] = &buf[..buf.len() - 1];
        for _ in 0..values.len() - 1 {
            assert!(take(&mut cut).is_some());
        }
        assert_eq!(take(&mut cut), None, "ends inside the last varint");
        let mut r = std::io::Cursor::new(vec![0x80u8]);
        assert!(read(&mut r).is_err());
        assert_eq!(take(&mut &[0xffu8; 11][..]), None, "too long");
    }
}
