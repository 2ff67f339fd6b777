use super::*;

fn spec(rows: u64, cols: u32) -> ShardSpec {
    ShardSpec {
        model: colonnade_common::model::ModelSpec {
            vocab_fingerprint: 7,
            vocab_size: rows,
            dim: cols * 2,
            negative: 5,
            sampling_power: 0.75,
            init_seed: 1,
            objective: colonnade_common::model::Objective::SkipGram,
        },
        col_start: cols,
        col_end: cols * 2,
    }
}

fn header(rows: u64, cols: u32, version: u64) -> Header {
    Header {
        model_fingerprint: 42,
        spec: spec(rows, cols),
        counts_fingerprint: counts_fingerprint(&[1, 2, 3]),
        version,
        lineage: 9,
        manifest: serde_json::json!({"workers": [{"worker": 0, "position": {"jobs": 3}}]}),
        written_unix_ms: 1,
    }
}

fn matrices(rows: u64, cols: u32, seed: f32) -> (Vec<f32>, Vec<f32>) {
    let n = (rows * u64::from(cols)) as usize;
    let u = (0..n).map(|i| seed + i as f32 * 0.5).collect();
    let v = (0..n).map(|i| -seed - i as f32 * 0.25).collect();
    (u, v)
}

#[test]
fn model_and_checkpoint_round_trip_bit_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = ModelDir::new(dir.path(), 42);
    let counts: Vec<u64> = (0..1000).map(|i| 1000 - i).collect();
    m.write_model(42, &spec(1000, 3), &counts).expect("model");
    let (fp, s, c) = m.read_model().expect("read model");
    assert_eq!((fp, s, c), (42, spec(1000, 3), counts));
    // Large enough to take several read blocks per matrix.
    let (rows, cols) = (300_000, 3);
    let (u, v) = matrices(rows, cols, 1.0);
    let h = header(rows, cols, 4);
    m.write_checkpoint(&h, &u, &v).expect("write");
    let (h2, u2, v2) = read_checkpoint(&m.checkpoint_path(4)).expect("read");
    assert_eq!(h2, h);
    assert_eq!(
        u2.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        u.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    assert_eq!(v2, v);
    // Blocks are whole rows and name their first row.
    let mut next = [0u64; 2];
    CheckpointReader::open(&m.checkpoint_path(4))
        .expect("open")
        .read_matrices(|w, first, values| {
            let i = usize::from(w == Matrix::Output);
            assert_eq!(first, next[i]);
            assert_eq!(values.len() % cols as usize, 0);
            next[i] += (values.len() / cols as usize) as u64;
        })
        .expect("stream");
    assert_eq!(next, [rows, rows]);
    assert_eq!(m.versions().expect("versions"), [4]);
}

#[test]
fn truncation_and_bit_flips_are_detected_and_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = ModelDir::new(dir.path(), 42);
    let (u, v) = matrices(50, 4, 2.0);
    m.write_checkpoint(&header(50, 4, 1), &u, &v)
        .expect("write");
    let path = m.checkpoint_path(1);
    let good = fs_err::read(&path).expect("bytes");
    let name = path.display().to_string();
    for cut in [good.len() - 1, good.len() / 2, 10] {
        fs_err::write(&path, &good[..cut]).expect("truncate");
        let e = CheckpointReader::open(&path)
            .err()
            .expect("truncation detected");
        assert!(
            e.to_string().contains(&name) && e.to_string().contains("truncated"),
            "{e}"
        );
    }
    // A bit flipped in the payload: caught by the payload checksum.
    let mut flipped = good.clone();
    let at = good.len() - 100;
    flipped[at] ^= 0x10;
    fs_err::write(&path, &flipped).expect("flip");
    let r = CheckpointReader::open(&path).expect("header still fine");
    let e = r
        .read_matrices(|_, _, _| {})
        .expect_err("payload flip detected");
    assert!(
        e.to_string().contains(&name) && e.to_string().contains("checksum mismatch"),
        "{e}"
    );
    // A bit flipped in the header: caught at open.
    let mut flipped = good.clone();
    flipped[30] ^= 0x01;
    fs_err::write(&path, &flipped).expect("flip");
    let e = CheckpointReader::open(&path)
        .err()
        .expect("header flip detected");
    assert!(e.to_string().contains(&name), "{e}");
    // Not a checkpoint at all.
    fs_err::write(&path, b"hello, this is not a checkpoint file at all").expect("write");
    let e = CheckpointReader::open(&path).err().expect("bad magic");
    assert!(e.to_string().contains("bad magic"), "{e}");
    // A hostile header length.
    let mut hostile = good[..16].to_vec();
    hostile[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    hostile.extend_from_slice(&[0; 64]);
    fs_err::write(&path, &hostile).expect("write");
    assert!(CheckpointReader::open(&path).is_err());
}

#[test]
fn versions_removal_and_temporaries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = ModelDir::new(dir.path(), 42);
    let (u, v) = matrices(10, 2, 0.0);
    for version in 1..=4 {
        m.write_checkpoint(&header(10, 2, version), &u, &v)
            .expect("write");
    }
    fs_err::write(m.path().join("v0000000005.ckpt.tmp"), b"half").expect("tmp");
    fs_err::write(m.path().join("notes.txt"), b"x").expect("other");
    assert_eq!(m.versions().expect("versions"), [1, 2, 3, 4]);
    m.remove_versions(|v| v < 3).expect("remove");
    m.clean_temporaries().expect("clean");
    assert_eq!(m.versions().expect("versions"), [3, 4]);
    assert!(!m.path().join("v0000000005.ckpt.tmp").exists());
    assert_eq!(ModelDir::list(dir.path()).expect("list").len(), 1);
    // The dropped mark: beside the versions, which it leaves alone.
    assert!(!m.is_dropped());
    m.mark_dropped().expect("mark");
    assert!(m.is_dropped());
    assert_eq!(m.versions().expect("versions"), [3, 4]);
    m.unmark_dropped().expect("unmark");
    m.unmark_dropped().expect("unmarking twice is fine");
    assert!(!m.is_dropped());
    m.remove_all().expect("remove all");
    assert!(ModelDir::list(dir.path()).expect("list").is_empty());
}

/// A checkpoint that does not fit on a full disk: the error names the file
/// and the cause, no temporary file stays, the previous version is intact.
/// Needs a tmpfs of 64 KiB (root; CI runs as root).
#[test]
fn a_full_disk_keeps_the_last_good_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount tmpfs (not root)");
        return;
    }
    struct Unmount<'a>(&'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(self.0).status();
        }
    }
    let _unmount = Unmount(dir.path());
    let m = ModelDir::new(dir.path(), 42);
    let (u, v) = matrices(100, 4, 3.0); // ~3 KiB
    m.write_checkpoint(&header(100, 4, 1), &u, &v)
        .expect("small version fits");
    let (bu, bv) = matrices(10_000, 4, 1.0); // ~320 KiB
    let e = m
        .write_checkpoint(&header(10_000, 4, 2), &bu, &bv)
        .expect_err("does not fit");
    let msg = e.to_string();
    assert!(
        msg.contains("No space left") && msg.contains("v0000000002.ckpt"),
        "{msg}"
    );
    assert_eq!(m.versions().expect("versions"), [1]);
    assert!(!m.checkpoint_path(2).with_extension("ckpt.tmp").exists());
    let (_, u1, v1) = read_checkpoint(&m.checkpoint_path(1)).expect("version 1 intact");
    assert_eq!((u1, v1), (u, v));
}
