//! `ebof completions SHELL` and `ebof man [SUBCOMMAND]` produce scripts and pages generated
//! from the clap definitions.

mod common;

use common::ebof;

#[test]
fn completions_and_man_pages_are_generated() {
    for shell in ["bash", "zsh", "fish"] {
        let o = ebof(&["completions", shell]);
        assert!(o.ok, "{shell}: {}", o.stderr);
        for word in ["ebof", "discover", "identify", "perf", "serve", "trsvcid"] {
            assert!(o.stdout.contains(word), "{shell} completion lacks {word}");
        }
    }
    let o = ebof(&["completions", "tcsh"]);
    assert!(!o.ok, "an unknown shell is an error");

    let o = ebof(&["man"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains(".TH ebof 1"), "{}", o.stdout);
    assert!(o.stdout.contains("discover"), "{}", o.stdout);
    let o = ebof(&["man", "serve"]);
    assert!(o.ok, "{}", o.stderr);
    assert!(o.stdout.contains(".TH ebof-serve 1"), "{}", o.stdout);
    assert!(o.stdout.contains("discovery\\-listen"), "{}", o.stdout);
    // The control plane's verbs are documented too.
    let o = ebof(&["man", "ctl"]);
    assert!(o.ok, "{}", o.stderr);
    for verb in [
        "show",
        "stats",
        "subsystem",
        "host",
        "ns",
        "listener",
        "save",
        "disconnect",
        "ana",
    ] {
        assert!(o.stdout.contains(verb), "ebof-ctl(1) lacks {verb}");
    }
    let o = ebof(&["completions", "bash"]);
    for word in [
        "ctl",
        "resize",
        "listener",
        "--shrink",
        "ana",
        "inaccessible",
    ] {
        assert!(o.stdout.contains(word), "bash completion lacks {word}");
    }
    let o = ebof(&["man", "fly"]);
    assert!(!o.ok);
    assert!(o.stderr.contains("no subcommand \"fly\""), "{}", o.stderr);
}
