//! The committed corpus (`fuzz/corpus/<target>/`) replays cleanly: every seed and every
//! reproducer added after a fix is a regression test, run by plain `cargo test`. (Locally the
//! directories may also hold what libFuzzer added; those replay too.) The
//! time-bounded mutation runs are `ebof-fuzz run` (a step of `scripts/test.sh`).

use ebof_fuzz::driver::{default_corpus_root, load_corpus, run_once};
use ebof_fuzz::{Features, TARGETS};

#[test]
fn committed_corpus_replays_cleanly() {
    let mut feat = Features::default();
    for t in TARGETS {
        let files = load_corpus(&default_corpus_root().join(t.name)).unwrap();
        assert!(!files.is_empty(), "no corpus for {}", t.name);
        for (path, data) in files {
            if let Err(m) = run_once(t, &data, &mut feat) {
                panic!("{}: {} failed: {m}", t.name, path.display());
            }
        }
    }
}

#[test]
fn generated_seeds_pass() {
    let mut feat = Features::default();
    for (target, name, bytes) in ebof_fuzz::seeds::all() {
        let t = ebof_fuzz::target(target).unwrap();
        if let Err(m) = run_once(t, &bytes, &mut feat) {
            panic!("seed {target}/{name} failed: {m}");
        }
        assert!(
            !feat.as_slice().is_empty(),
            "{target}/{name} reported nothing"
        );
    }
}

#[test]
fn every_target_has_a_distinct_name() {
    let mut names: Vec<_> = TARGETS.iter().map(|t| t.name).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), TARGETS.len());
}
