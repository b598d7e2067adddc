//! `ebof completions SHELL` and `ebof man [SUBCOMMAND]`: shell completion scripts and roff man
//! pages generated from the clap definitions, so they never drift from `--help`.

use std::io::Write;

use anyhow::{Context, Result, bail};
use clap::CommandFactory;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// A subcommand (serve, discover, ...) for its own page; none for ebof(1).
    #[arg(value_name = "SUBCOMMAND")]
    pub subcommand: Option<String>,
}

/// Write the completion script for `a.shell` to stdout.
pub fn completions<C: CommandFactory>(a: CompletionsArgs) -> Result<()> {
    let mut cmd = C::command();
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, name, &mut out);
    std::io::stdout()
        .write_all(&out)
        .context("cannot write the completion script")
}

/// Write the man page of the program, or of one subcommand, to stdout.
pub fn man<C: CommandFactory>(a: ManArgs) -> Result<()> {
    let out = man_page(C::command(), a.subcommand.as_deref())?;
    std::io::stdout()
        .write_all(&out)
        .context("cannot write the man page")
}

/// The roff text of `cmd`'s page, or of its subcommand `sub` (titled `ebof-sub`, the way git
/// and nvme-cli name theirs).
fn man_page(cmd: clap::Command, sub: Option<&str>) -> Result<Vec<u8>> {
    let page = match sub {
        None => cmd,
        Some(s) => {
            let parent = cmd.get_name().to_string();
            let Some(c) = cmd.find_subcommand(s) else {
                let names: Vec<&str> = cmd.get_subcommands().map(|c| c.get_name()).collect();
                bail!("no subcommand {s:?} (one of: {})", names.join(", "));
            };
            let version = cmd.get_version().map(str::to_string);
            let mut c = c.clone().name(format!("{parent}-{s}"));
            if let Some(v) = version {
                c = c.version(v);
            }
            c
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .render(&mut out)
        .context("cannot render the man page")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    #[command(name = "demo", version = "1.2.3", about = "A demo")]
    struct Demo {
        #[command(subcommand)]
        cmd: DemoCmd,
    }

    #[derive(clap::Subcommand)]
    enum DemoCmd {
        /// Run the thing.
        Run {
            /// How fast.
            #[arg(long)]
            speed: u32,
        },
    }

    #[test]
    fn man_pages_for_the_program_and_a_subcommand() {
        let top = String::from_utf8(man_page(Demo::command(), None).unwrap()).unwrap();
        assert!(top.contains(".TH demo 1"), "{top}");
        assert!(top.contains("Run the thing"), "{top}");
        let sub = String::from_utf8(man_page(Demo::command(), Some("run")).unwrap()).unwrap();
        assert!(sub.contains(".TH demo-run 1"), "{sub}");
        assert!(sub.contains("speed"), "{sub}");
        let err = man_page(Demo::command(), Some("fly")).unwrap_err();
        assert_eq!(err.to_string(), "no subcommand \"fly\" (one of: run)");
    }
}
