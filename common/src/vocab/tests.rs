use super::*;

#[test]
fn order_is_count_desc_then_bytes() {
    let v = Vocab::from_pairs(
        vec![
            ("b".into(), 3),
            ("a".into(), 3),
            ("z".into(), 9),
            ("é".into(), 3),
            ("c".into(), 1),
        ],
        Some(4),
    )
    .expect("valid");
    assert_eq!(v.words().collect::<Vec<_>>(), ["z", "a", "b", "é"]);
    assert_eq!(v.id("b"), Some(2));
    assert_eq!(v.id("c"), None);
}

#[test]
fn save_load_roundtrip_keeps_fingerprint() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("v.tsv");
    let v = Vocab::from_pairs(
        vec![("x".into(), 5), ("yé".into(), 7), ("w".into(), 5)],
        None,
    )
    .expect("valid");
    v.save(&p).expect("save");
    let back = Vocab::load(&p).expect("load");
    assert_eq!(
        back.words().collect::<Vec<_>>(),
        v.words().collect::<Vec<_>>()
    );
    assert_eq!(back.fingerprint(), v.fingerprint());
    fs_err::write(&p, "</s> 10\nthe 5\nof 4\n").expect("write");
    assert_eq!(
        Vocab::load(&p)
            .expect("word2vec format")
            .words()
            .collect::<Vec<_>>(),
        ["the", "of"]
    );
}

#[test]
fn counting_skips_invalid_sentences_when_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("c.txt");
    fs_err::write(&p, b"a a b\nb \xff c\na c\n").expect("write");
    let mut abort = Counter::default();
    let e = abort
        .count_files(std::slice::from_ref(&p))
        .expect_err("aborts by default");
    assert!(e.to_string().contains("line 2"), "{e}");
    let mut skip = Counter::new(InvalidUtf8::Skip);
    skip.count_files(&[p]).expect("skips");
    assert_eq!((skip.tokens, skip.skipped_sentences), (5, 1));
    let v = skip.into_vocab(1, None).expect("vocab");
    assert_eq!(v.words().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(v.counts(), [3, 1, 1]);
}

#[test]
fn bad_files_name_the_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("v.tsv");
    fs_err::write(&p, "a\t1\nb\tx\n").expect("write");
    let e = Vocab::load(&p).expect_err("bad count").to_string();
    assert!(e.contains("v.tsv:2") && e.contains("count"), "{e}");
    fs_err::write(&p, "a\t1\na\t2\n").expect("write");
    let e = Vocab::load(&p).expect_err("duplicate").to_string();
    assert!(e.contains("duplicate"), "{e}");
}

#[test]
fn errors_quote_a_long_line_cut_and_name_the_flag_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("corpus.txt");
    // A corpus given as the vocabulary: one long line of words.
    let line = "anarchism originated as a term ".repeat(10_000);
    fs_err::write(&p, &line).expect("write");
    let e = Vocab::load(&p).expect_err("a corpus");
    let msg = e.for_flag("--vocab", &p);
    assert!(msg.len() < 400, "{msg}");
    assert!(
        msg.starts_with(&format!("--vocab {}:1: ", p.display())),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("… ({} bytes)", line.trim_end().len())),
        "{msg}"
    );
    assert!(msg.contains("is this a corpus?"), "{msg}");
    let missing = dir.path().join("missing.tsv");
    let e = Vocab::load(&missing).expect_err("missing");
    let msg = e.for_flag("--vocab", &missing);
    assert_eq!(msg.matches("missing.tsv").count(), 1, "{msg}");
    assert!(msg.starts_with("cannot read --vocab "), "{msg}");
    assert_eq!(quoted("é".repeat(100).as_str()).matches('é').count(), 80);
    assert_eq!(quoted("short"), "\"short\"");
}

#[test]
fn the_streaming_reader_agrees_with_load_and_checks_order_and_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("v.tsv");
    let v = Vocab::from_pairs(
        vec![
            ("x".into(), 5),
            ("yé".into(), 7),
            ("w".into(), 5),
            ("#tag".into(), 1),
        ],
        None,
    )
    .expect("valid");
    v.save(&p).expect("save");
    let mut r = VocabReader::open(&p).expect("open");
    let mut read = Vec::new();
    while let Some((w, c)) = r.next_entry().expect("entry") {
        read.push((w.to_string(), c));
    }
    assert_eq!(r.header(), Some((4, v.fingerprint())));
    assert_eq!(r.finish().expect("finish"), (4, v.fingerprint()));
    let words: Vec<&str> = read.iter().map(|(w, _)| w.as_str()).collect();
    assert_eq!(words, v.words().collect::<Vec<_>>());
    let counts = VocabCounts::load(&p).expect("counts");
    assert_eq!(counts.counts, v.counts());
    assert_eq!(counts.fingerprint, v.fingerprint());
    assert_eq!(counts.total_count(), 18);

    // Out of order: named with its line.
    fs_err::write(&p, "a\t3\nb\t4\n").expect("write");
    let e = VocabCounts::load(&p).expect_err("order").to_string();
    assert!(e.contains("v.tsv:2") && e.contains("out of order"), "{e}");
    fs_err::write(&p, "b\t3\na\t3\n").expect("write");
    assert!(VocabCounts::load(&p).is_err(), "ties by bytes ascending");
    // Edited after it was written: the header's fingerprint says so.
    v.save(&p).expect("save");
    let edited = fs_err::read_to_string(&p)
        .expect("read")
        .replace("#tag\t1", "#tag\t2");
    fs_err::write(&p, edited).expect("write");
    let e = VocabCounts::load(&p).expect_err("edited").to_string();
    assert!(e.contains("changed after"), "{e}");
}
