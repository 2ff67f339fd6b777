//! Words stored compactly, for vocabularies of tens of millions: every word
//! in one UTF-8 arena in id order, its end offset in a `Vec<u64>`, and an
//! index from a word to its id that holds only the 4-byte id (the word is
//! compared in the arena). About 14 bytes a word beside the words' own
//! bytes, where a `HashMap<String, u32>` and a `Vec<String>` take ~90.

use hashbrown::HashTable;
use std::hash::BuildHasher;

/// The hasher of every word index: fast, and the same in every process (not
/// that anything depends on it across processes).
fn hash(word: &[u8]) -> u64 {
    rustc_hash::FxBuildHasher.hash_one(word)
}

/// Words by id, and ids by word.
#[derive(Clone, Default)]
pub struct WordTable {
    arena: String,
    ends: Vec<u64>,
    index: HashTable<u32>,
}

impl std::fmt::Debug for WordTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordTable")
            .field("words", &self.len())
            .field("bytes", &self.arena.len())
            .finish()
    }
}

impl WordTable {
    /// An empty table with room for `words` words of `bytes` bytes in all.
    pub fn with_capacity(words: usize, bytes: usize) -> Self {
        Self {
            arena: String::with_capacity(bytes),
            ends: Vec::with_capacity(words),
            index: HashTable::with_capacity(words),
        }
    }

    fn bytes_of(&self, id: u32) -> &[u8] {
        Self::bytes_in(&self.arena, &self.ends, id)
    }

    /// Appends `word` as the next id, unless it is there already: then
    /// returns the id it has as the error.
    pub fn push(&mut self, word: &str) -> Result<u32, u32> {
        let h = hash(word.as_bytes());
        if let Some(&id) = self.index.find(h, |&id| {
            Self::bytes_in(&self.arena, &self.ends, id) == word.as_bytes()
        }) {
            return Err(id);
        }
        let id = self.ends.len() as u32;
        self.arena.push_str(word);
        self.ends.push(self.arena.len() as u64);
        let (arena, ends) = (&self.arena, &self.ends);
        self.index
            .insert_unique(h, id, |&i| hash(Self::bytes_in(arena, ends, i)));
        Ok(id)
    }

    /// Appends `word` as the next id even when it is there already (the
    /// rows of a foreign vector file may repeat a word): every id keeps its
    /// own word for [`Self::get`], and [`Self::id`] finds a word's first id.
    pub fn push_row(&mut self, word: &str) -> u32 {
        match self.push(word) {
            Ok(id) => id,
            Err(_) => {
                self.arena.push_str(word);
                self.ends.push(self.arena.len() as u64);
                (self.ends.len() - 1) as u32
            }
        }
    }

    fn bytes_in<'a>(arena: &'a str, ends: &[u64], id: u32) -> &'a [u8] {
        let i = id as usize;
        let start = if i == 0 { 0 } else { ends[i - 1] as usize };
        &arena.as_bytes()[start..ends[i] as usize]
    }

    /// The word of `id` (panics if there is none: ids come from this table).
    pub fn get(&self, id: u32) -> &str {
        let i = id as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.arena[start..self.ends[i] as usize]
    }

    /// The id of `word`.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.index
            .find(hash(word.as_bytes()), |&id| {
                self.bytes_of(id) == word.as_bytes()
            })
            .copied()
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The words in id order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.ends.len() as u32).map(|id| self.get(id))
    }

    /// Bytes held on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity() + self.ends.capacity() * 8 + self.index.allocation_size()
    }
}

/// Why `word` cannot be a vocabulary word, if it cannot: it holds a control
/// character (Unicode category Cc: NUL, the C0 controls, DEL, the C1
/// controls). The corpus reader splits only on ASCII whitespace, so such a
/// word can be read, but HDF5 strings end at NUL and Python's `str.split`
/// (gensim) splits on several of the others: every output would hold it
/// wrong, or fail to be written after training.
pub fn unwritable(word: &str) -> Option<String> {
    let (at, c) = word.char_indices().find(|(_, c)| c.is_control())?;
    let name = match c {
        '\0' => " (NUL)",
        '\x7f' => " (DEL)",
        _ => "",
    };
    Some(format!(
        "holds control character U+{:04X}{name} at byte {at}; words may hold any character but \
         ASCII whitespace and control characters (remove them from the corpus first, e.g. \
         `tr -d '\\000-\\010\\013\\016-\\037\\177'`)",
        c as u32
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_unwritable() {
        assert_eq!(unwritable("naïve"), None);
        assert_eq!(unwritable("#tag</s>"), None);
        let e = unwritable("ab\0c").expect("NUL");
        assert!(e.contains("U+0000 (NUL) at byte 2"), "{e}");
        assert!(unwritable("a\x0bb").is_some(), "vertical tab");
        assert!(unwritable("a\x7f").is_some(), "DEL");
        assert!(unwritable("a\u{85}").is_some(), "C1 NEL");
    }

    #[test]
    fn words_round_trip_by_id_and_by_word() {
        let mut t = WordTable::default();
        let words = ["the", "é", "", "of", "#tag", "naïve"];
        for (i, w) in words.iter().enumerate() {
            assert_eq!(t.push(w), Ok(i as u32));
        }
        assert_eq!(t.push("of"), Err(3), "a word is there once");
        assert_eq!(t.len(), words.len());
        for (i, w) in words.iter().enumerate() {
            assert_eq!(t.get(i as u32), *w);
            assert_eq!(t.id(w), Some(i as u32));
        }
        assert_eq!(t.id("missing"), None);
        assert_eq!(t.iter().collect::<Vec<_>>(), words);
    }

    #[test]
    fn repeated_rows_keep_their_words_and_the_first_id() {
        let mut t = WordTable::default();
        let rows = ["a", "b", "a", "c", "b"];
        let ids: Vec<u32> = rows.iter().map(|w| t.push_row(w)).collect();
        assert_eq!(ids, [0, 1, 2, 3, 4]);
        assert_eq!(t.iter().collect::<Vec<_>>(), rows);
        assert_eq!(
            (t.id("a"), t.id("b"), t.id("c")),
            (Some(0), Some(1), Some(3))
        );
        assert_eq!(t.push("c"), Err(3));
    }

    #[test]
    fn a_million_words_take_far_less_than_strings_in_a_map() {
        let mut t = WordTable::default();
        for i in 0..1_000_000u32 {
            t.push(&format!("w{i:x}")).expect("distinct");
        }
        assert_eq!(t.id("w1e240"), Some(0x1e240));
        // ~6.9 bytes of text a word here; 14 + text, with the growth slack
        // of the arena, the ends and the index, stays under 40.
        let per_word = t.heap_bytes() as f64 / 1e6;
        assert!(per_word < 40.0, "{per_word} bytes a word");
    }
}
