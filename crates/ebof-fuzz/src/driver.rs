//! The stable driver: replay a target's corpus, then mutate it for a bounded time.
//!
//! Per target: every file of `fuzz/corpus/<target>/` runs first (a failing seed is a
//! regression); then, until the time is up, an input is picked from the pool (the seeds plus
//! the inputs kept so far), mutated ([`crate::mutate::havoc`], sometimes spliced with another
//! pool input) and run. An input whose outcome shows a feature not seen before joins the pool.
//! A panic stops the target: the input is written to `<crash_dir>/<target>/crash-<hash>` and
//! reported with its bytes and the commands that replay it.
//!
//! Not coverage-guided: that is what `cargo +nightly fuzz run <target>` (libFuzzer, `fuzz/`)
//! is for; this loop is what fits in CI on stable Rust.

use crate::mutate::{Rng, havoc};
use crate::{Features, Target, fnv1a};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Pool entries kept at most (seeds included).
const POOL_MAX: usize = 4096;

/// Where the committed corpus lives (`fuzz/corpus` of the repository).
pub fn default_corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

/// Where crash reproducers go (`target/fuzz-crashes` of the repository).
pub fn default_crash_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-crashes")
}

/// How the driver runs each target.
#[derive(Clone, Debug)]
pub struct Options {
    /// Time spent mutating after the replay.
    pub time: Duration,
    /// Seed of the mutation RNG (printed, so a run can be repeated).
    pub seed: u64,
    /// Directory holding one corpus directory per target ([`default_corpus_root`]).
    pub corpus_root: PathBuf,
    /// Directory crash reproducers are written under, one subdirectory per target
    /// ([`default_crash_dir`]).
    pub crash_dir: PathBuf,
}

/// What one target's run did.
#[derive(Debug)]
pub struct Report {
    /// Name of the target.
    pub target: &'static str,
    /// Corpus files replayed.
    pub seeds: usize,
    /// Runs of the target in all, replay included.
    pub execs: u64,
    /// Inputs kept for showing new outcome features.
    pub kept: usize,
    /// Distinct outcome features seen, replay included.
    pub features: usize,
    /// Wall-clock time of the whole run, replay included.
    pub elapsed: Duration,
    /// Longest single run of the target.
    pub slowest: Duration,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.elapsed.as_secs_f64();
        write!(
            f,
            "fuzz {:<14} {:>9} execs in {:>5.1} s ({:>6.0}/s); {} seeds replayed, {} inputs kept, {} features; slowest exec {:.1} ms",
            self.target,
            self.execs,
            secs,
            self.execs as f64 / secs.max(1e-9),
            self.seeds,
            self.kept,
            self.features,
            self.slowest.as_secs_f64() * 1e3,
        )
    }
}

/// A failing input.
#[derive(Debug)]
pub struct Crash {
    /// Name of the target.
    pub target: &'static str,
    /// The panic message, or why the corpus could not be read.
    pub message: String,
    /// The input that failed (empty when the corpus could not be read).
    pub input: Vec<u8>,
    /// Where the input was saved (`None` if it could not be written).
    pub path: Option<PathBuf>,
    /// The committed corpus file that failed, when the failure came from the replay.
    pub seed_file: Option<PathBuf>,
}

impl std::fmt::Display for Crash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "fuzz target {} FAILED: {}", self.target, self.message)?;
        if let Some(p) = &self.seed_file {
            writeln!(f, "  corpus file: {}", p.display())?;
        }
        match &self.path {
            Some(p) => {
                writeln!(
                    f,
                    "  reproducer: {} ({} bytes)",
                    p.display(),
                    self.input.len()
                )?;
                writeln!(
                    f,
                    "  replay: cargo run -p ebof-fuzz -- replay {} {}",
                    self.target,
                    p.display()
                )?;
                writeln!(
                    f,
                    "      or: cargo +nightly fuzz run {} {}",
                    self.target,
                    p.display()
                )?;
            }
            None => writeln!(f, "  (the reproducer could not be saved)")?,
        }
        write!(f, "  bytes: {}", hex(&self.input, 512))
    }
}

/// `bytes` as hex, at most `max` of them.
pub fn hex(bytes: &[u8], max: usize) -> String {
    let mut s = String::new();
    for (i, b) in bytes.iter().take(max).enumerate() {
        if i > 0 && i % 32 == 0 {
            s.push_str("\n         ");
        }
        let _ = write!(s, "{b:02x}");
    }
    if bytes.len() > max {
        let _ = write!(s, " ... ({} more)", bytes.len() - max);
    }
    s
}

/// The files of a corpus directory, sorted by name (dot-files skipped); none if it is absent.
pub fn load_corpus(dir: &Path) -> std::io::Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut files = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(e) => return Err(e),
    };
    for e in entries {
        let path = e?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.'));
        if path.is_file() && !hidden {
            let data = std::fs::read(&path)?;
            files.push((path, data));
        }
    }
    files.sort();
    Ok(files)
}

/// Run `target` on `data` once; `Err` holds the panic message.
pub fn run_once(target: &Target, data: &[u8], feat: &mut Features) -> Result<(), String> {
    feat.clear();
    catch_unwind(AssertUnwindSafe(|| (target.run)(data, feat))).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_string()))
            .unwrap_or_else(|| "panic with a non-string payload".into())
    })
}

fn crash(
    target: &Target,
    opts: &Options,
    message: String,
    input: Vec<u8>,
    seed_file: Option<PathBuf>,
) -> Box<Crash> {
    let dir = opts.crash_dir.join(target.name);
    let path = dir.join(format!("crash-{:016x}", fnv1a(&input)));
    let saved = std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&path, &input))
        .is_ok();
    Box::new(Crash {
        target: target.name,
        message,
        input,
        path: saved.then_some(path),
        seed_file,
    })
}

/// Replay the corpus of `target`, then mutate for `opts.time`.
pub fn fuzz(target: &Target, opts: &Options) -> Result<Report, Box<Crash>> {
    let start = Instant::now();
    let corpus = load_corpus(&opts.corpus_root.join(target.name)).map_err(|e| {
        Box::new(Crash {
            target: target.name,
            message: format!("cannot read the corpus: {e}"),
            input: Vec::new(),
            path: None,
            seed_file: None,
        })
    })?;
    let mut feat = Features::default();
    let mut seen: HashSet<u64> = HashSet::new();
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut slowest = Duration::ZERO;
    for (path, data) in &corpus {
        let t = Instant::now();
        if let Err(m) = run_once(target, data, &mut feat) {
            return Err(crash(target, opts, m, data.clone(), Some(path.clone())));
        }
        slowest = slowest.max(t.elapsed());
        seen.extend(feat.as_slice().iter().copied());
        pool.push(data.clone());
    }
    let seeds = pool.len();
    if pool.is_empty() {
        pool.push(Vec::new());
    }
    let mut rng = Rng::new(opts.seed ^ fnv1a(target.name.as_bytes()));
    let mut execs = corpus.len() as u64;
    let mut kept = 0;
    let deadline = Instant::now() + opts.time;
    let mut input = Vec::with_capacity(target.max_len);
    while Instant::now() < deadline {
        input.clear();
        input.extend_from_slice(&pool[rng.below(pool.len())]);
        let other = &pool[rng.below(pool.len())];
        havoc(&mut rng, &mut input, other, target.max_len);
        let t = Instant::now();
        let r = run_once(target, &input, &mut feat);
        slowest = slowest.max(t.elapsed());
        execs += 1;
        if let Err(m) = r {
            return Err(crash(target, opts, m, input, None));
        }
        let mut new = false;
        for &f in feat.as_slice() {
            new |= seen.insert(f);
        }
        if new {
            kept += 1;
            if pool.len() < POOL_MAX {
                pool.push(input.clone());
            } else {
                // Keep the seeds; replace a kept input.
                let i = seeds + rng.below(pool.len() - seeds);
                pool[i] = input.clone();
            }
        }
    }
    Ok(Report {
        target: target.name,
        seeds,
        execs,
        kept,
        features: seen.len(),
        elapsed: start.elapsed(),
        slowest,
    })
}
