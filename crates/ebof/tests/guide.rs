//! The README and the user guide (`docs/guide/`) hold together: every relative Markdown link
//! in them reaches an existing file, every `#anchor` into a Markdown file names one of its
//! headings (GitHub's slugs), every guide page is listed in the README's "Where to read on" and
//! in the guide's index, and the README's test command is the one CI runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every page of docs/guide/, as (path, text).
fn pages() -> Vec<(PathBuf, String)> {
    let root = root();
    let mut paths = vec![root.join("README.md")];
    let mut guide: Vec<PathBuf> = std::fs::read_dir(root.join("docs/guide"))
        .expect("docs/guide exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guide.sort();
    paths.extend(guide);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            (p, text)
        })
        .collect()
}

/// The lines of `text` outside fenced code blocks, with their 1-based numbers.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// `line` without its inline code spans (a `](` inside backticks is not a link).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The link targets of one line: what follows `](` up to the closing parenthesis.
fn links(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut out = Vec::new();
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let end = rest.find(')').unwrap_or(rest.len());
        let target = rest[..end].split_whitespace().next().unwrap_or("");
        out.push(target.to_string());
        rest = &rest[end..];
    }
    out
}

/// GitHub's anchor for a heading: lower case, only letters, digits, `-`, `_` and spaces kept,
/// spaces turned into `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor of a Markdown text (a repeated heading gets `-1`, `-2`, … as on GitHub).
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, line) in prose(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let s = slug(&line[hashes..]);
        let n = seen.entry(s.clone()).or_insert(0);
        out.push(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut checked = 0;
    let mut broken = Vec::new();
    for (page, text) in pages() {
        let dir = page.parent().expect("a page has a directory");
        for (n, line) in prose(&text) {
            for target in links(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let file = if path.is_empty() {
                    page.clone()
                } else {
                    dir.join(path)
                };
                let at = format!("{}:{n}: {target}", page.display());
                if !file.exists() {
                    broken.push(format!("{at}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if file.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let linked = std::fs::read_to_string(&file).expect("a readable page");
                if !anchors(&linked).iter().any(|a| a == anchor) {
                    broken.push(format!("{at}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        checked > 30,
        "only {checked} links found: is the parser right?"
    );
}

#[test]
fn every_guide_page_is_listed_in_the_readme_and_the_index() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let index = std::fs::read_to_string(root.join("docs/guide/README.md")).unwrap();
    let where_to = &readme[readme
        .find("## Where to read on")
        .expect("README has a Where to read on section")..];
    let mut pages = 0;
    for (page, _) in self::pages() {
        let name = page.file_name().unwrap().to_string_lossy().into_owned();
        if page.parent().unwrap().ends_with("docs/guide") && name != "README.md" {
            pages += 1;
            assert!(
                where_to.contains(&format!("](docs/guide/{name})")),
                "README's Where to read on does not link {name}"
            );
            assert!(
                index.contains(&format!("]({name})")),
                "docs/guide/README.md does not link {name}"
            );
        }
    }
    assert!(pages >= 5, "{pages} guide pages");
}

#[test]
fn the_readme_test_command_is_what_ci_runs() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let at = readme
        .find("## The two commands")
        .expect("README keeps The two commands");
    let section = &readme[at..];
    let block = &section[section.find("```sh\n").expect("its sh block")..];
    assert!(block.contains("./scripts/serve.sh"), "{block}");
    assert!(block.contains("./scripts/test.sh"), "{block}");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(ci.contains("exec ./scripts/test.sh"), "{ci}");
}

#[test]
fn the_slugs_are_githubs() {
    assert_eq!(slug(" Multipath (ANA)"), "multipath-ana");
    assert_eq!(
        slug(" The papers' test plans: `ebof bench`"),
        "the-papers-test-plans-ebof-bench"
    );
    assert_eq!(
        anchors("# A\n```\n# not a heading\n```\n## A\n"),
        ["a", "a-1"]
    );
    assert_eq!(
        links("see [x](a.md#b) and `[y](not)` ![z](c.svg)"),
        ["a.md#b", "c.svg"]
    );
}
