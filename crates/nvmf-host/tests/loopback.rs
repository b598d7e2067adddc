//! nvmf-host against an in-process fake controller (tests/fake): bring-up, admin commands,
//! discovery, I/O on every data path (in-capsule, R2T + split H2CData, split C2HData, C2HData
//! SUCCESS), flow control, errors and connection loss.

mod fake;

use std::time::Duration;

use nvme_spec::{NamespaceId, Status};
use nvmf_host::{Controller, DataDir, HostConfig, HostError, IoQueueOptions, discover};

const NS: NamespaceId = NamespaceId(1);

fn cfg() -> HostConfig {
    HostConfig {
        connect_timeout: Duration::from_secs(5),
        admin_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(5),
        ..HostConfig::default()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test]
async fn bring_up_and_admin_commands() {
    let addr = fake::start(fake::Options::default()).await.addr;
    let ctrl = Controller::connect(addr, fake::SUBNQN, &cfg())
        .await
        .unwrap();
    assert_eq!(ctrl.identify().mn, "ebof fake target");
    assert_eq!(ctrl.cntlid(), nvme_spec::ControllerId(1));
    assert_eq!(ctrl.cap().mqes, 127);
    assert_eq!(ctrl.version(), nvme_spec::NVME_VERSION);
    assert_eq!(ctrl.max_transfer(), Some(128 * 1024));
    assert_eq!(ctrl.io_icd_max(), 4096);
    assert_eq!(ctrl.io_queues_granted(), Some(1));
    assert_eq!(ctrl.identify_controller().await.unwrap().sn, "FAKE0001");
    assert_eq!(ctrl.active_namespaces().await.unwrap(), vec![NS]);
    let ns = ctrl.identify_namespace(NS).await.unwrap();
    assert_eq!((ns.nsze, ns.lba_size()), (fake::NS_BLOCKS, 512));
    let descs = ctrl.ns_id_descriptors(NS).await.unwrap();
    assert_eq!(descs.len(), 2);
    ctrl.smart_log().await.unwrap();
    assert!(
        ctrl.error_log(2).await.unwrap().is_empty(),
        "entries with error count 0 are not reported"
    );
    assert_eq!(ctrl.set_num_queues(4).await.unwrap(), 4);
    // Many admin commands at once exceed the 31 admin slots: the task queues them.
    let many = (0..40).map(|_| ctrl.get_features(nvme_spec::opcode::feature::KATO, 0));
    for r in futures_join(many).await {
        r.unwrap();
    }
    ctrl.shutdown().await.unwrap();
    ctrl.disconnect().await;
}

/// Join futures without a futures crate: poll them all from one task.
async fn futures_join<F: std::future::Future>(fs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for f in fs {
        set.push(Box::pin(f));
    }
    let mut out: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().map(Option::unwrap).collect()
}

#[tokio::test]
async fn discovery_log() {
    let addr = fake::start(fake::Options::default()).await.addr;
    let log = discover(addr, &cfg()).await.unwrap();
    assert_eq!((log.genctr, log.numrec, log.entries.len()), (7, 2, 2));
    assert_eq!(log.entries[1].subnqn, fake::SUBNQN);
    assert_eq!(log.entries[1].trsvcid, addr.port().to_string());
}

#[tokio::test]
async fn io_single_commands_every_path() {
    let addr = fake::start(fake::Options::default()).await.addr;
    let ctrl = Controller::connect(addr, fake::SUBNQN, &cfg())
        .await
        .unwrap();
    let mut q = ctrl.io_queue(1, 0, false).await.unwrap();
    assert_eq!(q.capacity(), 127, "HostConfig::queue_size 128 entries");
    assert!(q.flow_control());
    assert_eq!(q.maxh2cdata(), 16 * 1024);
    // 4 KiB: in-capsule; 64 KiB: R2T + 4 H2CData; reads split into 8 KiB C2HData PDUs.
    for (slba, len) in [
        (0u64, 4096usize),
        (100, 65536),
        (1000, 512),
        (2000, 128 * 1024),
    ] {
        let data = pattern(len, slba as u8);
        let nlb = (len / 512) as u32;
        q.write(NS, slba, nlb, &data).await.unwrap();
        let mut back = vec![0u8; len];
        q.read(NS, slba, nlb, &mut back).await.unwrap();
        assert_eq!(back, data, "slba {slba} len {len}");
    }
    q.flush(NS).await.unwrap();
    q.write_zeroes(NS, 0, 8).await.unwrap();
    q.deallocate(NS, &[(0, 8), (100, 16)]).await.unwrap();
    // Out of range: a status, and the queue lives on.
    let mut b = vec![0u8; 512];
    let e = q.read(NS, fake::NS_BLOCKS, 1, &mut b).await.unwrap_err();
    assert_eq!(e.status(), Some(Status::LBA_RANGE));
    q.read(NS, 0, 1, &mut b).await.unwrap();
    // Larger than the queue's max I/O (MDTS 128 KiB).
    let mut big = vec![0u8; 256 * 1024];
    assert!(matches!(
        q.read(NS, 0, 512, &mut big).await,
        Err(HostError::InvalidArgument(_))
    ));
    drop(q);
    ctrl.disconnect().await;
}

/// Many commands in flight through submit/poll, with per-slot buffers.
async fn deep_queue(opts: fake::Options, dissqfc: bool, digests: bool) {
    let addr = fake::start(opts).await.addr;
    let mut c = cfg();
    c.hdr_digest = digests;
    c.data_digest = digests;
    let ctrl = Controller::connect(addr, fake::SUBNQN, &c).await.unwrap();
    let mut q = ctrl
        .io_connector()
        .connect(&IoQueueOptions::new(1, 17).dissqfc(dissqfc).prealloc(8192))
        .await
        .unwrap();
    assert_eq!(q.capacity(), 16);
    assert_eq!(q.flow_control(), !dissqfc);
    let blocks_per_io = 16u32; // 8 KiB: R2T path for writes
    let len = blocks_per_io as usize * 512;
    let ios = 200u64;
    // Writes, 16 in flight.
    let mut next = 0u64;
    let mut done = 0u64;
    while done < ios {
        while next < ios {
            let slba = next * u64::from(blocks_per_io);
            let seed = next as u8;
            match q
                .submit_write(NS, slba, blocks_per_io, len, next, |b| {
                    b.copy_from_slice(&pattern(len, seed))
                })
                .unwrap()
            {
                Some(_) => next += 1,
                None => break,
            }
        }
        assert!(q.in_flight() <= 16);
        done += q
            .poll_completions(|c| {
                assert!(c.is_success(), "{:?}", c.status());
            })
            .await
            .unwrap() as u64;
    }
    // Reads, checked against what was written.
    let (mut next, mut done) = (0u64, 0u64);
    while done < ios {
        while next < ios {
            match q
                .submit_read(
                    NS,
                    next * u64::from(blocks_per_io),
                    blocks_per_io,
                    len,
                    next,
                )
                .unwrap()
            {
                Some(_) => next += 1,
                None => break,
            }
        }
        done += q
            .poll_completions(|c| {
                assert!(c.is_success());
                assert_eq!(c.data, &pattern(len, c.user as u8)[..], "io {}", c.user);
            })
            .await
            .unwrap() as u64;
    }
    assert_eq!(q.poll_completions(|_| {}).await.unwrap(), 0);
    drop(q);
    ctrl.disconnect().await;
}

#[tokio::test]
async fn deep_queue_flow_control() {
    deep_queue(fake::Options::default(), false, false).await;
}

#[tokio::test]
async fn deep_queue_dissqfc_success_flag() {
    deep_queue(
        fake::Options {
            success_flag: true,
            ..Default::default()
        },
        true,
        false,
    )
    .await;
}

#[tokio::test]
async fn deep_queue_with_digests() {
    deep_queue(fake::Options::default(), false, true).await;
}

#[tokio::test]
async fn read_errors_are_statuses() {
    let addr = fake::start(fake::Options {
        fail_reads: Some(Status::UNRECOVERED_READ),
        ..Default::default()
    })
    .await
    .addr;
    let ctrl = Controller::connect(addr, fake::SUBNQN, &cfg())
        .await
        .unwrap();
    let mut q = ctrl.io_queue(1, 8, false).await.unwrap();
    let mut b = vec![0u8; 4096];
    match q.read(NS, 0, 8, &mut b).await {
        Err(HostError::Status(s)) => assert_eq!(s, Status::UNRECOVERED_READ),
        other => panic!("{other:?}"),
    }
    q.write(NS, 0, 8, &b).await.unwrap();
}

#[tokio::test]
async fn connection_loss_fails_in_flight_commands() {
    let addr = fake::start(fake::Options {
        drop_on_write: true,
        ..Default::default()
    })
    .await
    .addr;
    let ctrl = Controller::connect(addr, fake::SUBNQN, &cfg())
        .await
        .unwrap();
    let mut q = ctrl.io_queue(1, 8, false).await.unwrap();
    for i in 0..3 {
        q.submit_read(NS, i, 1, 512, 100 + i).unwrap().unwrap();
    }
    q.submit_write(NS, 0, 1, 512, 7, |b| b.fill(1))
        .unwrap()
        .unwrap();
    let mut ok = 0;
    let err = loop {
        match q.poll_completions(|_| ok += 1).await {
            Ok(_) => continue,
            Err(e) => break e,
        }
    };
    assert!(
        matches!(err, HostError::Disconnected | HostError::Transport(_)),
        "{err:?}"
    );
    assert!(q.is_broken());
    let mut lost = Vec::new();
    q.fail_in_flight(|u| lost.push(u));
    assert_eq!(ok + lost.len(), 4);
    assert!(lost.contains(&7));
    assert!(matches!(
        q.submit_read(NS, 0, 1, 512, 0),
        Err(HostError::Disconnected)
    ));
    // The admin association is separate and still works.
    ctrl.identify_controller().await.unwrap();
    // A new queue (qid reuse on a new connection) works again for reads.
    let mut q2 = ctrl.io_queue(2, 8, false).await.unwrap();
    let mut b = vec![0u8; 512];
    q2.read(NS, 0, 1, &mut b).await.unwrap();
}

#[tokio::test]
async fn raw_submit_and_queue_full() {
    let addr = fake::start(fake::Options::default()).await.addr;
    let ctrl = Controller::connect(addr, fake::SUBNQN, &cfg())
        .await
        .unwrap();
    let mut q = ctrl.io_queue(1, 3, false).await.unwrap();
    assert_eq!(q.capacity(), 2);
    let sqe = nvme_spec::Sqe::new(nvme_spec::opcode::io::FLUSH, nvme_spec::CommandId(0));
    assert!(
        q.submit_raw(sqe, DataDir::None, 0, 1, |_| {})
            .unwrap()
            .is_some()
    );
    assert!(q.submit_flush(NS, 2).unwrap().is_some());
    assert!(
        q.submit_flush(NS, 3).unwrap().is_none(),
        "queue of 3 entries holds 2 commands"
    );
    assert!(matches!(q.flush(NS).await, Err(HostError::QueueBusy)));
    let mut n = 0;
    while n < 2 {
        n += q
            .poll_completions(|c| assert!(c.is_success()))
            .await
            .unwrap();
    }
    q.flush(NS).await.unwrap();
}

#[tokio::test]
async fn connect_errors() {
    // Nothing listening.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    assert!(matches!(
        Controller::connect(addr, fake::SUBNQN, &cfg()).await,
        Err(HostError::Transport(_))
    ));
    // Bad NQN.
    assert!(matches!(
        Controller::connect(addr, "not-an-nqn", &cfg()).await,
        Err(HostError::InvalidArgument(_))
    ));
}

#[tokio::test]
async fn keep_alive_and_async_events() {
    let fake = fake::start(fake::Options {
        aen_once: true,
        ..Default::default()
    })
    .await;
    let c = HostConfig {
        kato_ms: 400,
        ..cfg()
    };
    let mut ctrl = Controller::connect(fake.addr, fake::SUBNQN, &c)
        .await
        .unwrap();
    let mut events = ctrl.take_events().unwrap();
    let ev = tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ev,
        nvmf_host::AsyncEvent {
            event_type: 2,
            info: 0,
            log_page: 4
        }
    );
    // Keep-alive every KATO/2 (checked on a 250 ms tick): a few within 1.5 s.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        fake.keep_alives() >= 3,
        "{} keep-alives",
        fake.keep_alives()
    );
    // The AER was re-armed after the event.
    assert_eq!(fake.aers(), 2);
    ctrl.disconnect().await;
}

#[tokio::test]
async fn discovery_controller_has_no_keep_alive_or_aer() {
    let fake = fake::start(fake::Options::default()).await;
    let c = cfg().for_discovery();
    let ctrl = Controller::connect(fake.addr, nvme_spec::DISCOVERY_NQN, &c)
        .await
        .unwrap();
    let log = ctrl.discovery_log().await.unwrap();
    assert_eq!(log.entries.len(), 2);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!((fake.keep_alives(), fake.aers()), (0, 0));
    ctrl.disconnect().await;
}
