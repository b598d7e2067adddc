//! `ebof` — one binary, wiring only: `serve` runs the NVMe/TCP target; `discover`, `identify`
//! and `perf` are the host toolkit on the `nvmf-host` library (perf's load generator is the
//! `ebof-perf` library); `bench` runs the seed papers' test plans on perf's engine (or fio)
//! and writes reports (`ebof_perf::bench`); `ctl` manages a running
//! `serve` through its management API (`ebof-mgmt`); `csi` is the CSI driver (`ebof-csi`); `completions` and `man` print
//! shell completions and man pages generated from the same clap definitions.

mod bench;
mod crypt;
mod csi;
mod ctl;
mod docs;
mod host_cmds;
mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ebof",
    version,
    about = "A software Ethernet SSD: NVMe/TCP target and host toolkit"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve RAM, files and block devices as NVMe namespaces over NVMe/TCP.
    Serve(serve::ServeArgs),
    /// Print a target's discovery log (like `nvme discover`).
    Discover(host_cmds::DiscoverArgs),
    /// Print Identify Controller / Namespace data of a subsystem.
    Identify(host_cmds::IdentifyArgs),
    /// Generate I/O load against a namespace and report IOPS, bandwidth and latency.
    Perf(host_cmds::PerfArgs),
    /// Run a seed paper's test plan (odcc, es2000, adq, latency, quick) and write a report
    /// with charts; `bench compare` sets two reports side by side.
    Bench(bench::BenchArgs),
    /// Manage a running `ebof serve`: show state, hosts, disconnect, stats and metrics.
    Ctl(ctl::CtlArgs),
    /// Container Storage Interface driver: provision volumes on ebof pool boxes (controller)
    /// and attach them with the kernel initiator (node), over gRPC on a Unix socket.
    Csi(csi::CsiArgs),
    /// Offline key tools for encryption at rest: a new key file, or a pool namespace's key
    /// for `cryptsetup --type plain` recovery.
    Crypt(crypt::CryptArgs),
    /// Print a shell completion script, e.g. `ebof completions bash > /etc/bash_completion.d/ebof`.
    Completions(docs::CompletionsArgs),
    /// Print a man page in roff: ebof(1), or ebof-SUBCOMMAND(1) with a subcommand name.
    Man(docs::ManArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Serve(a) => serve::run(a),
        Cmd::Discover(a) => host_cmds::discover(a),
        Cmd::Identify(a) => host_cmds::identify(a),
        Cmd::Perf(a) => host_cmds::perf(a),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Ctl(a) => ctl::run(a),
        Cmd::Csi(a) => csi::run(a),
        Cmd::Crypt(a) => crypt::run(a),
        Cmd::Completions(a) => docs::completions::<Cli>(a),
        Cmd::Man(a) => docs::man::<Cli>(a),
    };
    match res {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ebof: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
