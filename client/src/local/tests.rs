use super::process::running;
use super::*;

#[test]
fn port_taken_is_read_from_the_log() {
    assert!(port_taken(
        "error: cannot listen on 127.0.0.1:5: Address already in use (os error 98)"
    ));
    assert!(!port_taken("error: --threads: invalid value"));
}

#[test]
fn a_state_file_with_a_pid_of_a_group_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(STATE_FILE);
    let state = |pid: i64| {
        format!(
            r#"{{"started_at":"x","started_unix_secs":0,"ps_shard":"/p","shards_flag":"a",
            "shards":[{{"pid":{pid},"endpoint":"a","data_dir":"/d","log":"/l"}}]}}"#
        )
    };
    for pid in [0, 1] {
        fs_err::write(&path, state(pid)).unwrap();
        let e = read_state(&path).unwrap_err().to_string();
        assert!(e.contains("cluster.json") && e.contains("pid"), "{e}");
    }
    fs_err::write(&path, state(-1)).unwrap();
    assert!(read_state(&path).is_err());
    fs_err::write(&path, "{").unwrap();
    let e = format!("{:#}", read_state(&path).unwrap_err());
    assert!(e.contains("cluster.json"), "{e}");
    fs_err::write(&path, state(4242)).unwrap();
    assert_eq!(read_state(&path).unwrap().unwrap().shards[0].pid, 4242);
    assert!(read_state(&dir.path().join("none.json")).unwrap().is_none());
}

#[test]
fn a_pid_that_is_not_a_shard_is_not_ours() {
    // This test process runs, but it is no ps-shard.
    let me = ShardEntry {
        pid: std::process::id(),
        endpoint: "127.0.0.1:1".into(),
        data_dir: "/nonexistent".into(),
        log: "/nonexistent.log".into(),
    };
    assert!(running(me.pid));
    assert!(!is_our_shard(&me));
    assert!(signal(0, 0).is_err() && signal(1, 0).is_err() && signal(-1, 0).is_err());
}
