//! The two layouts of `Embeddings` agree: the same vectors written once as
//! uncompressed HDF5 (used in place from a memory map) and once deflated
//! (read and normalised in memory) give the same `similar` neighbours and
//! the same `eval` report (analogies, word pairs, groups, node labels).

use clap::Parser;
use colonnade_eval::embeddings::Embeddings;
use colonnade_eval::evaluate::{self, EvalArgs};
use colonnade_eval::similar::{self, SimilarArgs};
use colonnade_formats::h5::Hdf5Writer;
use colonnade_formats::Provenance;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

const DIM: usize = 24;
const BASES: usize = 300;
const FILLER: usize = 3000;

#[derive(Parser)]
struct Eval {
    #[command(flatten)]
    args: EvalArgs,
}

#[derive(Parser)]
struct Similar {
    #[command(flatten)]
    args: SimilarArgs,
}

/// Words and rows: `b{i}` random, `b{i}_r{r}` = `b{i}` + relation r + noise
/// (analogies and groups that hold), random filler, an all-zero row and a
/// word on two rows.
fn vectors() -> (Vec<String>, Vec<f32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let mut gauss = |scale: f32| -> Vec<f32> {
        (0..DIM)
            .map(|_| (rng.random::<f32>() - 0.5) * 2.0 * scale)
            .collect()
    };
    let relations = [gauss(0.4), gauss(0.4)];
    let mut words = Vec::new();
    let mut rows = Vec::new();
    for i in 0..BASES {
        let base = gauss(1.0);
        for (r, rel) in relations.iter().enumerate() {
            let noise = gauss(0.1);
            words.push(format!("b{i}_r{r}"));
            rows.extend(
                base.iter()
                    .zip(rel)
                    .zip(&noise)
                    .map(|((b, x), n)| b + x + n),
            );
        }
        words.push(format!("b{i}"));
        rows.extend(&base);
        if i == BASES / 2 {
            words.push("zero".into());
            rows.extend([0.0; DIM]);
            words.push("dup".into());
            rows.extend(gauss(1.0));
        }
    }
    for i in 0..FILLER {
        words.push(format!("f{i}"));
        rows.extend(gauss(1.0));
    }
    words.push("dup".into());
    rows.extend(gauss(1.0));
    (words, rows)
}

fn write(path: &Path, words: &[String], rows: &[f32], compress: Option<u8>) {
    let counts: Vec<u64> = (0..words.len() as u64).rev().collect();
    let provenance = Provenance {
        dim: DIM as u64,
        ..Provenance::default()
    };
    let mut w = Hdf5Writer::create(path, &counts, DIM as u32, false, compress, &provenance)
        .expect("create");
    w.write_words(words.iter().map(String::as_str))
        .expect("words");
    w.write_input(0, rows).expect("rows");
    w.finish().expect("finish");
}

/// The questions, pairs, groups and labels, as files in `dir`.
fn task_files(dir: &Path, words: &[String]) -> [PathBuf; 4] {
    let mut rng = ChaCha8Rng::seed_from_u64(61);
    let mut analogies = String::new();
    for (r, section) in ["capital-common-countries", "gram1-adjective-to-adverb"]
        .iter()
        .enumerate()
    {
        let _ = writeln!(analogies, ": {section}");
        for _ in 0..150 {
            let (i, j) = (rng.random_range(0..BASES), rng.random_range(0..BASES));
            // Upper case on one word: the lookup is case-insensitive.
            let _ = writeln!(analogies, "B{i} b{i}_r{r} b{j} b{j}_r{r}");
        }
    }
    let _ = writeln!(analogies, "b1 nosuchword b2 b3");
    let mut pairs = String::from("# word1\tword2\tscore\n");
    for _ in 0..200 {
        let a = &words[rng.random_range(0..words.len())];
        let b = &words[rng.random_range(0..words.len())];
        let _ = writeln!(pairs, "{a}\t{b}\t{:.2}", rng.random::<f64>() * 10.0);
    }
    let mut groups = String::new();
    for i in 0..BASES {
        let _ = writeln!(groups, "b{i} b{i}_r0 b{i}_r1");
    }
    let mut labels = String::new();
    for i in 0..BASES {
        let _ = writeln!(labels, "b{i} L{}", i % 3);
        let _ = writeln!(labels, "b{i}_r0 L{}", i % 3);
    }
    let out = ["q.txt", "pairs.tsv", "groups.txt", "labels.txt"].map(|n| dir.join(n));
    for (path, text) in out.iter().zip([analogies, pairs, groups, labels]) {
        fs_err::write(path, text).expect("write task file");
    }
    out
}

#[test]
fn mapped_and_loaded_vectors_give_the_same_neighbours_and_scores() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (words, rows) = vectors();
    let plain = dir.path().join("plain.h5");
    let deflated = dir.path().join("deflated.h5");
    write(&plain, &words, &rows, None);
    write(&deflated, &words, &rows, Some(4));

    let mapped = Embeddings::load(&plain).expect("plain");
    let loaded = Embeddings::load(&deflated).expect("deflated");
    assert!(mapped.is_mapped(), "uncompressed HDF5 is used in place");
    assert!(!loaded.is_mapped(), "deflated HDF5 is loaded");
    for e in [&mapped, &loaded] {
        assert_eq!(e.len(), words.len());
        assert_eq!(e.dim(), DIM);
        let first = words.iter().position(|w| w == "dup").expect("dup");
        assert_eq!(
            e.id("dup"),
            Some(first as u32),
            "a word finds its first row"
        );
        assert_eq!(
            e.word(words.len() as u32 - 1),
            "dup",
            "every row keeps its word"
        );
        assert!(e.words().eq(words.iter().map(String::as_str)));
    }
    for i in [0u32, 7, 450, words.len() as u32 - 1] {
        assert_eq!(mapped.unit_row(i), loaded.unit_row(i), "row {i}");
    }

    // `similar`: the same neighbours in the same order, cosines within 1e-6.
    let queries = ["b0", "b17_r1", "B42", "zero", "dup", "f2999", "nosuchword"];
    let report = |path: &Path| {
        let mut argv = vec!["similar".to_owned(), "--vectors".into()];
        argv.push(path.display().to_string());
        argv.extend(["--k".into(), "12".into()]);
        argv.extend(queries.map(String::from));
        similar::search(&Similar::parse_from(argv).args).expect("similar")
    };
    let (a, b) = (report(&plain), report(&deflated));
    assert_eq!(a.unknown, ["nosuchword"]);
    assert_eq!(a.unknown, b.unknown);
    assert_eq!(a.results.len(), queries.len());
    for (x, y) in a.results.iter().zip(&b.results) {
        assert_eq!(x.matched, y.matched);
        let names = |r: &similar::QueryResult| -> Vec<String> {
            r.neighbours.iter().map(|n| n.word.clone()).collect()
        };
        assert_eq!(names(x), names(y), "neighbours of {}", x.word);
        for (p, q) in x.neighbours.iter().zip(&y.neighbours) {
            assert!(
                (p.cosine - q.cosine).abs() < 1e-6,
                "{}: {p:?} {q:?}",
                x.word
            );
        }
    }
    let b17 = &a.results[1].neighbours;
    assert!(
        ["b17", "b17_r0"].contains(&b17[0].word.as_str()),
        "the planted structure is found: {b17:?}"
    );

    // `eval`: the same report apart from the file and the timings.
    let [analogies, pairs, groups, labels] = task_files(dir.path(), &words);
    let eval = |path: &Path| {
        let argv: Vec<String> = [
            "eval".into(),
            "--vectors".into(),
            path.display().to_string(),
            "--analogies".into(),
            analogies.display().to_string(),
            "--similarity".into(),
            pairs.display().to_string(),
            "--groups".into(),
            groups.display().to_string(),
            "--labels".into(),
            labels.display().to_string(),
            "--label-fractions".into(),
            "0.5".into(),
            "--label-splits".into(),
            "1".into(),
            "--restrict".into(),
            "0".into(),
        ]
        .into();
        let report = evaluate::evaluate(&Eval::parse_from(argv).args).expect("eval");
        let mut v = serde_json::to_value(&report).expect("json");
        let o = v.as_object_mut().expect("object");
        o.remove("vectors");
        o["labels"]
            .as_object_mut()
            .expect("labels")
            .remove("seconds");
        v
    };
    let (a, b) = (eval(&plain), eval(&deflated));
    assert_eq!(a, b);
    let total = &a["analogies"][0]["total"];
    assert_eq!(total["evaluated"], 300, "{total}");
    assert!(
        total["cos_add"]["correct"].as_u64().expect("correct") > 250,
        "the planted analogies hold: {total}"
    );
    let recall = a["groups"]["samples"][0]["recall"]
        .as_f64()
        .expect("recall");
    assert!(recall > 0.9, "{recall}");
    assert!(a["similarity"][0]["spearman"].is_number());
}
