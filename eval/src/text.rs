//! Text rules the evaluation-file readers share: Python's whitespace (gensim
//! reads analogy and word-pair files with `str.split()` and `str.strip()`,
//! and [`py_split`] and [`py_strip`] cut where they do), decoding a file's
//! bytes with the line of the first invalid one in the error, and how much
//! of a bad line an error quotes.

use crate::error::EvalError;
use std::path::Path;

/// Characters of a line an error message quotes, at most.
const EXCERPT_CHARS: usize = 80;

/// Python's `str.isspace`: Unicode White_Space plus U+001C..U+001F.
pub(crate) fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.split()` (no argument).
pub(crate) fn py_split(s: &str) -> impl Iterator<Item = &str> {
    s.split(py_space).filter(|w| !w.is_empty())
}

/// Python's `str.strip()` (no argument).
pub(crate) fn py_strip(s: &str) -> &str {
    s.trim_matches(py_space)
}

/// `bytes`, the contents of `path`, as text; the error names the line of the
/// first byte that is not UTF-8.
pub(crate) fn utf8<'a>(path: &Path, bytes: &'a [u8]) -> Result<&'a str, EvalError> {
    std::str::from_utf8(bytes).map_err(|e| EvalError::Parse {
        path: path.to_path_buf(),
        line: line_of(bytes, e.valid_up_to()),
        msg: format!("not UTF-8 ({e})"),
    })
}

/// The line (1-based) of `bytes` that byte `offset` lies on.
pub(crate) fn line_of(bytes: &[u8], offset: usize) -> u64 {
    1 + bytes[..offset].iter().filter(|b| **b == b'\n').count() as u64
}

/// The start of `line` as an error quotes it.
pub(crate) fn excerpt(line: &str) -> String {
    line.chars().take(EXCERPT_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_pythons() {
        // U+001C..U+001F are whitespace to Python's str.isspace, not to Unicode.
        let words: Vec<&str> = py_split(" a\u{1f}b\u{2003}c\t\u{a0}\n").collect();
        assert_eq!(words, ["a", "b", "c"]);
        assert_eq!(py_strip("\u{1c} x y \u{a0}"), "x y");
        assert_eq!(py_split(" \u{1d} ").count(), 0);
    }

    #[test]
    fn text_that_is_not_utf8_names_its_line() {
        let e = utf8(Path::new("f.txt"), b"ok\nstill ok\nbad \xff\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.txt:3: not UTF-8 ("), "{e}");
        assert_eq!(utf8(Path::new("f.txt"), "é\n".as_bytes()).unwrap(), "é\n");
        assert_eq!(
            [0, 1, 2, 4, 5].map(|at| line_of(b"a\nb\nc", at)),
            [1, 1, 2, 3, 3]
        );
    }

    #[test]
    fn an_excerpt_is_the_first_80_characters() {
        assert_eq!(excerpt(&"é".repeat(100)), "é".repeat(80));
        assert_eq!(excerpt("short"), "short");
    }
}
