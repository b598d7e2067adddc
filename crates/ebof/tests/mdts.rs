//! The largest transfer of one command (`[target] max_transfer`, Identify MDTS): 1 MiB by
//! default over NVMe/TCP; one command of that size writes and reads back whole on RAM and file
//! namespaces (several R2Ts' worth of H2CData and C2HData PDUs); one block more is refused
//! before any data moves; a smaller setting is what Identify reports. Servers are killed by
//! PID (common::Target).

mod common;

use common::free_port;
use common::served::serve_file;
use nvme_spec::NamespaceId;
use nvmf_host::{Controller, HostConfig};
use std::net::SocketAddr;
use std::path::Path;

const NQN: &str = "nqn.2026-11.io.ebof:mdts";
const BS: usize = 512;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn config(dir: &Path, a: SocketAddr, tuning: &str) -> std::path::PathBuf {
    let text = format!(
        "[target]\n{tuning}\n[[listeners]]\naddress = \"{}\"\nport = {}\n\n\
         [[subsystems]]\nnqn = \"{NQN}\"\nallow_any_host = true\n\n\
         [[subsystems.namespaces]]\nnsid = 1\nbackend = \"ram\"\nsize = \"16M\"\n\n\
         [[subsystems.namespaces]]\nnsid = 2\nbackend = \"file\"\npath = {:?}\nsize = \"16M\"\n",
        a.ip(),
        a.port(),
        dir.join("ns2.img"),
    );
    let p = dir.join("ebof.toml");
    std::fs::write(&p, text).unwrap();
    p
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

#[test]
fn one_mib_commands_write_and_read_back_whole_and_more_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (_t, _sock) = serve_file(&config(dir.path(), addr, ""), dir.path(), addr);
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &HostConfig::default())
            .await
            .unwrap();
        assert_eq!(c.max_transfer(), Some(1 << 20), "MDTS");
        let mut q = c.io_queue(1, 0, false).await.unwrap();
        let len = 1 << 20;
        for ns in [1u32, 2] {
            // An odd start, so the command spans both ends of several pages.
            let slba = 7;
            let data = pattern(ns as u8, len);
            q.write(NamespaceId(ns), slba, (len / BS) as u32, &data)
                .await
                .unwrap_or_else(|e| panic!("ns {ns}: 1 MiB write: {e}"));
            let mut back = vec![0u8; len];
            q.read(NamespaceId(ns), slba, (len / BS) as u32, &mut back)
                .await
                .unwrap_or_else(|e| panic!("ns {ns}: 1 MiB read: {e}"));
            assert!(back == data, "ns {ns}: 1 MiB read back differs");
        }
        c.disconnect().await;
    });
}

#[test]
fn a_smaller_max_transfer_is_what_identify_reports_and_enforces() {
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let cfg = config(dir.path(), addr, "max_transfer = 65536\n");
    let (_t, _sock) = serve_file(&cfg, dir.path(), addr);
    rt().block_on(async {
        let c = Controller::connect(addr, NQN, &HostConfig::default())
            .await
            .unwrap();
        assert_eq!(c.max_transfer(), Some(65536), "MDTS");
        let mut q = c.io_queue(1, 0, false).await.unwrap();
        let data = pattern(3, 65536);
        q.write(NamespaceId(1), 0, (65536 / BS) as u32, &data)
            .await
            .unwrap();
        let mut back = vec![0u8; 65536];
        q.read(NamespaceId(1), 0, (65536 / BS) as u32, &mut back)
            .await
            .unwrap();
        assert!(back == data);
        // One block past MDTS: the host library refuses it before sending (its queue was
        // sized from MDTS).
        let big = vec![0u8; 65536 + BS];
        assert!(
            q.write(NamespaceId(1), 0, (big.len() / BS) as u32, &big)
                .await
                .is_err(),
            "a write past MDTS was taken"
        );
        c.disconnect().await;
    });
}
