//! `ebof-fuzz`: run the fuzz targets on stable Rust (see `docs/fuzzing.md`).
//!
//! ```text
//! ebof-fuzz run [--secs N] [--jobs N] [--seed N] [TARGET...]   replay the corpus, then mutate
//! ebof-fuzz replay TARGET FILE...                              run single inputs (reproducers)
//! ebof-fuzz seeds                                              regenerate fuzz/corpus/*/seed-*
//! ebof-fuzz list                                               the targets
//! ```
//!
//! `--secs` defaults to `EBOF_FUZZ_SECS`, else 30 (per target; in a run of every target the
//! small decoders get a half or a quarter of it, see `Target::time_div`); `--jobs` to 2 (targets run in
//! parallel, one per thread); `--seed` to `EBOF_FUZZ_SEED`, else the clock. Exit status 1 if a
//! target failed.

#![forbid(unsafe_code)]

use ebof_fuzz::driver::{self, Options};
use ebof_fuzz::{Features, TARGETS, Target};
use std::process::ExitCode;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn usage() -> ExitCode {
    eprintln!(
        "usage: ebof-fuzz run [--secs N] [--jobs N] [--seed N] [TARGET...]\n       ebof-fuzz replay TARGET FILE...\n       ebof-fuzz seeds\n       ebof-fuzz list"
    );
    ExitCode::from(2)
}

fn env_num(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("replay") => replay(&args[1..]),
        Some("seeds") => seeds(),
        Some("list") => {
            for t in TARGETS {
                println!("{}", t.name);
            }
            ExitCode::SUCCESS
        }
        _ => usage(),
    }
}

fn pick_targets(names: &[String]) -> Result<Vec<&'static Target>, String> {
    if names.is_empty() || names.iter().any(|n| n == "all") {
        return Ok(TARGETS.iter().collect());
    }
    names
        .iter()
        .map(|n| ebof_fuzz::target(n).ok_or_else(|| format!("no fuzz target {n:?} (see `list`)")))
        .collect()
}

fn run(args: &[String]) -> ExitCode {
    let mut secs = env_num("EBOF_FUZZ_SECS").unwrap_or(30);
    let mut jobs = 2u64;
    let mut seed = env_num("EBOF_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let mut names = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |what: &str| -> Option<u64> {
            let v = it.next().and_then(|v| v.parse().ok());
            if v.is_none() {
                eprintln!("{what} needs a number");
            }
            v
        };
        match a.as_str() {
            "--secs" => match num("--secs") {
                Some(v) => secs = v,
                None => return usage(),
            },
            "--jobs" => match num("--jobs") {
                Some(v) => jobs = v.max(1),
                None => return usage(),
            },
            "--seed" => match num("--seed") {
                Some(v) => seed = v,
                None => return usage(),
            },
            s if s.starts_with("--") => return usage(),
            s => names.push(s.to_string()),
        }
    }
    let every = names.is_empty() || names.iter().any(|n| n == "all");
    let targets = match pick_targets(&names) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{e}");
            return usage();
        }
    };
    let opts = Options {
        time: Duration::from_secs(secs),
        seed,
        corpus_root: driver::default_corpus_root(),
        crash_dir: driver::default_crash_dir(),
    };
    let share = if every {
        " (the small decoders a half or a quarter of it)"
    } else {
        ""
    };
    println!(
        "fuzzing {} target(s), {secs} s each{share} after replaying the corpus, {jobs} at a time; EBOF_FUZZ_SEED={seed}",
        targets.len()
    );
    let next = AtomicUsize::new(0);
    let failed = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.min(targets.len() as u64) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(t) = targets.get(i) else { break };
                    let opts = Options {
                        time: if every {
                            opts.time / t.time_div.max(1)
                        } else {
                            opts.time
                        },
                        ..opts.clone()
                    };
                    match driver::fuzz(t, &opts) {
                        Ok(r) => println!("{r}"),
                        Err(c) => {
                            eprintln!("{c}");
                            failed
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(t.name);
                        }
                    }
                }
            });
        }
    });
    let failed = failed.into_inner().unwrap_or_else(|e| e.into_inner());
    if failed.is_empty() {
        println!("fuzz: {} passed, 0 failed", targets.len());
        ExitCode::SUCCESS
    } else {
        println!(
            "fuzz: {} passed, {} failed ({})",
            targets.len() - failed.len(),
            failed.len(),
            failed.join(", ")
        );
        ExitCode::FAILURE
    }
}

fn replay(args: &[String]) -> ExitCode {
    let [name, files @ ..] = args else {
        return usage();
    };
    let Some(t) = ebof_fuzz::target(name) else {
        eprintln!("no fuzz target {name:?}");
        return usage();
    };
    let mut bad = 0;
    let mut feat = Features::default();
    for f in files {
        let data = match std::fs::read(f) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{f}: {e}");
                bad += 1;
                continue;
            }
        };
        match driver::run_once(t, &data, &mut feat) {
            Ok(()) => println!(
                "{f}: ok ({} bytes, {} features)",
                data.len(),
                feat.as_slice().len()
            ),
            Err(m) => {
                println!("{f}: FAILED: {m}");
                bad += 1;
            }
        }
    }
    if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn seeds() -> ExitCode {
    let root = driver::default_corpus_root();
    for (target, name, bytes) in ebof_fuzz::seeds::all() {
        let dir = root.join(target);
        let path = dir.join(format!("seed-{name}"));
        if let Err(e) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&path, &bytes)) {
            eprintln!("{}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("{} ({} bytes)", path.display(), bytes.len());
    }
    ExitCode::SUCCESS
}
