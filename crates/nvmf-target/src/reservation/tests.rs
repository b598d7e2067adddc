//! The reservation table against NVMe Base 2.0 section 8.19.

use super::*;
use nvme_spec::resv::{log_type as lt, racqa, rrega, rrela, rtype as rt};

const A: HostId = [0xA; 16];
const B: HostId = [0xB; 16];
const C: HostId = [0xC; 16];
const KA: u64 = 0xAAAA;
const KB: u64 = 0xBBBB;

fn cdw(action: u8, rtype: u8) -> ResvCdw10 {
    ResvCdw10 {
        action,
        iekey: false,
        rtype,
        cptpl: cptpl::NO_CHANGE,
    }
}

fn keys(crkey: u64, second: u64) -> ResvKeys {
    ResvKeys { crkey, second }
}

fn reg(t: &mut ResvTable, h: &HostId, k: u64) {
    t.register(h, cdw(rrega::REGISTER, 0), keys(0, k), false)
        .unwrap();
}

/// A registered with KA holding a reservation of type `ty`, B registered with KB, C not.
fn held(ty: u8) -> ResvTable {
    let mut t = ResvTable::default();
    reg(&mut t, &A, KA);
    reg(&mut t, &B, KB);
    t.acquire(&A, cdw(racqa::ACQUIRE, ty), keys(KA, 0)).unwrap();
    t
}

/// The spec's table, written out as it is printed ("Command Behavior in the Presence of a
/// Reservation"): for each type, (registrant read, registrant write, non-registrant read,
/// non-registrant write). The holder may do everything.
const SPEC_TABLE: [(u8, [bool; 4]); 6] = [
    (rt::WRITE_EXCLUSIVE, [true, false, true, false]),
    (rt::EXCLUSIVE_ACCESS, [false, false, false, false]),
    (rt::WRITE_EXCLUSIVE_REG_ONLY, [true, true, true, false]),
    (rt::EXCLUSIVE_ACCESS_REG_ONLY, [true, true, false, false]),
    (rt::WRITE_EXCLUSIVE_ALL_REGS, [true, true, true, false]),
    (rt::EXCLUSIVE_ACCESS_ALL_REGS, [true, true, false, false]),
];

/// Every opcode of each command group, as the table classes them.
const READ_GROUP: [u8; 3] = [io::READ, io::COMPARE, io::VERIFY];
const WRITE_GROUP: [u8; 6] = [
    io::WRITE,
    io::WRITE_ZEROES,
    io::WRITE_UNCORRECTABLE,
    io::DATASET_MGMT,
    io::COPY,
    io::FLUSH,
];

#[test]
fn access_table_pure_function_matches_spec() {
    for (ty, [rr, rw, nr, nw]) in SPEC_TABLE {
        for class in [CmdClass::Read, CmdClass::Write, CmdClass::Unrestricted] {
            assert!(
                access_allowed(ty, Role::Holder, class),
                "holder {ty} {class:?}"
            );
        }
        assert_eq!(
            access_allowed(ty, Role::Registrant, CmdClass::Read),
            rr,
            "type {ty}"
        );
        assert_eq!(
            access_allowed(ty, Role::Registrant, CmdClass::Write),
            rw,
            "type {ty}"
        );
        assert_eq!(
            access_allowed(ty, Role::NonRegistrant, CmdClass::Read),
            nr,
            "type {ty}"
        );
        assert_eq!(
            access_allowed(ty, Role::NonRegistrant, CmdClass::Write),
            nw,
            "type {ty}"
        );
        assert!(access_allowed(
            ty,
            Role::NonRegistrant,
            CmdClass::Unrestricted
        ));
    }
}

/// Every type × {holder, registrant, non-registrant} × every opcode of both groups, through
/// the table with real hosts. Under the All Registrants types the registrant B holds too.
#[test]
fn access_table_through_the_table_every_type_role_opcode() {
    for (ty, [rr, rw, nr, nw]) in SPEC_TABLE {
        let t = held(ty);
        let b_holds = all_registrants(ty);
        assert_eq!(t.role(&A), Role::Holder);
        assert_eq!(
            t.role(&B),
            if b_holds {
                Role::Holder
            } else {
                Role::Registrant
            }
        );
        assert_eq!(t.role(&C), Role::NonRegistrant);
        for op in READ_GROUP {
            assert_eq!(t.check(&A, class_of(op)), Ok(()));
            assert_eq!(
                t.check(&B, class_of(op)).is_ok(),
                rr || b_holds,
                "{ty} B {op:#x}"
            );
            assert_eq!(t.check(&C, class_of(op)).is_ok(), nr, "{ty} C {op:#x}");
        }
        for op in WRITE_GROUP {
            assert_eq!(t.check(&A, class_of(op)), Ok(()));
            assert_eq!(
                t.check(&B, class_of(op)).is_ok(),
                rw || b_holds,
                "{ty} B {op:#x}"
            );
            assert_eq!(t.check(&C, class_of(op)).is_ok(), nw, "{ty} C {op:#x}");
        }
        // A conflict is Reservation Conflict (SCT 0h, SC 83h).
        let e = t.check(&C, CmdClass::Write).unwrap_err();
        assert_eq!((e.sct, e.sc), (0, 0x83));
        // The reservation commands and others are never refused by the table.
        for op in [
            io::RESV_REPORT,
            io::RESV_REGISTER,
            io::RESV_ACQUIRE,
            io::RESV_RELEASE,
        ] {
            assert_eq!(class_of(op), CmdClass::Unrestricted);
            assert_eq!(t.check(&C, class_of(op)), Ok(()));
        }
    }
    // No reservation: registrations alone restrict nothing.
    let mut t = ResvTable::default();
    reg(&mut t, &A, KA);
    assert_eq!(t.check(&C, CmdClass::Write), Ok(()));
}

#[test]
fn register_unregister_replace_keys_iekey_and_generation() {
    let mut t = ResvTable::default();
    reg(&mut t, &A, KA);
    assert_eq!(t.generation, 1);
    // Again with the same key: success (and a new generation); another key: conflict.
    reg(&mut t, &A, KA);
    assert_eq!(t.generation, 2);
    let r = t.register(&A, cdw(rrega::REGISTER, 0), keys(0, 7), false);
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    assert_eq!(t.generation, 2, "a failed command leaves the generation");
    // Replace with the wrong current key: conflict; the right one: new key.
    let r = t.register(&A, cdw(rrega::REPLACE, 0), keys(1, 7), false);
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    t.register(&A, cdw(rrega::REPLACE, 0), keys(KA, 7), false)
        .unwrap();
    assert_eq!(t.registrant(&A).unwrap().key, 7);
    // IEKEY ignores the current key.
    let mut ie = cdw(rrega::REPLACE, 0);
    ie.iekey = true;
    t.register(&A, ie, keys(999, 8), false).unwrap();
    assert_eq!(t.registrant(&A).unwrap().key, 8);
    // Replace by an unregistered host: conflict, or a registration with IEKEY.
    let r = t.register(&B, cdw(rrega::REPLACE, 0), keys(0, KB), false);
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    t.register(&B, ie, keys(0, KB), false).unwrap();
    assert_eq!(t.registrant(&B).unwrap().key, KB);
    // Unregister: wrong key conflict, IEKEY succeeds, unregistered host conflict.
    let r = t.register(&A, cdw(rrega::UNREGISTER, 0), keys(1, 0), false);
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    let mut ieu = cdw(rrega::UNREGISTER, 0);
    ieu.iekey = true;
    t.register(&A, ieu, keys(1, 0), false).unwrap();
    assert!(t.registrant(&A).is_none());
    let r = t.register(&C, cdw(rrega::UNREGISTER, 0), keys(0, 0), false);
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    t.register(&B, cdw(rrega::UNREGISTER, 0), keys(KB, 0), false)
        .unwrap();
    assert!(t.regs.is_empty());
    assert_eq!(t.generation, 7);
    // An unknown action.
    let r = t.register(&A, cdw(3, 0), keys(0, 1), false);
    assert_eq!(r, Err(Status::INVALID_FIELD));
}

#[test]
fn cptpl_changes_ptpl_only_when_capable_and_valid() {
    let mut t = ResvTable::default();
    let mut c = cdw(rrega::REGISTER, 0);
    c.cptpl = cptpl::SET;
    assert_eq!(
        t.register(&A, c, keys(0, KA), false),
        Err(Status::INVALID_FIELD)
    );
    assert!(
        t.regs.is_empty(),
        "nothing registered when CPTPL is refused"
    );
    c.cptpl = cptpl::RESERVED;
    assert_eq!(
        t.register(&A, c, keys(0, KA), true),
        Err(Status::INVALID_FIELD)
    );
    c.cptpl = cptpl::SET;
    t.register(&A, c, keys(0, KA), true).unwrap();
    assert!(t.ptpl);
    c.cptpl = cptpl::CLEAR;
    t.register(&A, c, keys(0, KA), true).unwrap();
    assert!(!t.ptpl);
}

#[test]
fn acquire_rules() {
    let mut t = ResvTable::default();
    reg(&mut t, &A, KA);
    reg(&mut t, &B, KB);
    let g = t.generation;
    // Not registered, wrong key: conflict. Bad type, IEKEY, bad action: invalid field.
    let r = t.acquire(&C, cdw(racqa::ACQUIRE, rt::WRITE_EXCLUSIVE), keys(0, 0));
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    let r = t.acquire(&A, cdw(racqa::ACQUIRE, rt::WRITE_EXCLUSIVE), keys(KB, 0));
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    for bad in [0, 7, 0xFF] {
        let r = t.acquire(&A, cdw(racqa::ACQUIRE, bad), keys(KA, 0));
        assert_eq!(r, Err(Status::INVALID_FIELD));
    }
    let mut ie = cdw(racqa::ACQUIRE, rt::WRITE_EXCLUSIVE);
    ie.iekey = true;
    assert_eq!(t.acquire(&A, ie, keys(KA, 0)), Err(Status::INVALID_FIELD));
    let r = t.acquire(&A, cdw(3, rt::WRITE_EXCLUSIVE), keys(KA, 0));
    assert_eq!(r, Err(Status::INVALID_FIELD));
    // Acquire; again with the same type succeeds; another type or another host conflicts.
    t.acquire(&A, cdw(racqa::ACQUIRE, rt::WRITE_EXCLUSIVE), keys(KA, 0))
        .unwrap();
    t.acquire(&A, cdw(racqa::ACQUIRE, rt::WRITE_EXCLUSIVE), keys(KA, 0))
        .unwrap();
    let r = t.acquire(&A, cdw(racqa::ACQUIRE, rt::EXCLUSIVE_ACCESS), keys(KA, 0));
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    let r = t.acquire(&B, cdw(racqa::ACQUIRE, rt::WRITE_EXCLUSIVE), keys(KB, 0));
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    assert_eq!(t.generation, g, "Acquire does not move the generation");
    // All Registrants: every registrant holds, so B's acquire of the same type succeeds.
    let mut t = held(rt::EXCLUSIVE_ACCESS_ALL_REGS);
    t.acquire(
        &B,
        cdw(racqa::ACQUIRE, rt::EXCLUSIVE_ACCESS_ALL_REGS),
        keys(KB, 0),
    )
    .unwrap();
}

#[test]
fn preempt_the_holder_and_abort() {
    for (action, aborts) in [(racqa::PREEMPT, false), (racqa::PREEMPT_AND_ABORT, true)] {
        let mut t = held(rt::WRITE_EXCLUSIVE);
        let g = t.generation;
        let out = t
            .acquire(&B, cdw(action, rt::EXCLUSIVE_ACCESS), keys(KB, KA))
            .unwrap();
        assert_eq!(
            t.reservation,
            Some(Reservation {
                rtype: rt::EXCLUSIVE_ACCESS,
                holder: B
            })
        );
        assert!(
            t.registrant(&A).is_none(),
            "the preempted holder is unregistered"
        );
        assert_eq!(t.generation, g + 1);
        assert!(out.notices.contains(&Notice {
            host: A,
            log_type: lt::REGISTRATION_PREEMPTED
        }));
        assert_eq!(out.aborted, if aborts { vec![A] } else { vec![] });
        // A now conflicts even on reads (Exclusive Access, non-registrant).
        assert!(t.check(&A, CmdClass::Read).is_err());
    }
}

#[test]
fn preempt_other_cases() {
    // A PRKEY nobody has: conflict, nothing changes.
    let mut t = held(rt::WRITE_EXCLUSIVE);
    let before = t.clone();
    let r = t.acquire(
        &B,
        cdw(racqa::PREEMPT, rt::WRITE_EXCLUSIVE),
        keys(KB, 0x1234),
    );
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    assert_eq!(t, before);
    // PRKEY 0 against a holder that is not All Registrants: invalid field.
    let r = t.acquire(&B, cdw(racqa::PREEMPT, rt::WRITE_EXCLUSIVE), keys(KB, 0));
    assert_eq!(r, Err(Status::INVALID_FIELD));
    // A PRKEY of a non-holder registrant: that registration goes, the reservation stays.
    reg(&mut t, &C, 0xCC);
    t.acquire(&B, cdw(racqa::PREEMPT, rt::WRITE_EXCLUSIVE), keys(KB, 0xCC))
        .unwrap();
    assert!(t.registrant(&C).is_none());
    assert_eq!(t.reservation.unwrap().holder, A);
    // No reservation: preempt removes the registrants with PRKEY.
    let mut t = ResvTable::default();
    reg(&mut t, &A, KA);
    reg(&mut t, &B, KB);
    let out = t
        .acquire(&B, cdw(racqa::PREEMPT, rt::WRITE_EXCLUSIVE), keys(KB, KA))
        .unwrap();
    assert!(t.registrant(&A).is_none() && t.reservation.is_none());
    assert_eq!(out.notices.len(), 1);
    // All Registrants with PRKEY 0: a new reservation, every other registrant preempted.
    let mut t = held(rt::WRITE_EXCLUSIVE_ALL_REGS);
    reg(&mut t, &C, 0xCC);
    let out = t
        .acquire(
            &B,
            cdw(racqa::PREEMPT_AND_ABORT, rt::EXCLUSIVE_ACCESS),
            keys(KB, 0),
        )
        .unwrap();
    assert_eq!(t.regs.len(), 1);
    assert_eq!(t.reservation.unwrap().rtype, rt::EXCLUSIVE_ACCESS);
    assert_eq!(t.role(&B), Role::Holder);
    let mut preempted: Vec<HostId> = out.aborted.clone();
    preempted.sort();
    assert_eq!(preempted, vec![A, C]);
    // All Registrants with a PRKEY: those registrants go, the reservation stays.
    let mut t = held(rt::WRITE_EXCLUSIVE_ALL_REGS);
    t.acquire(
        &B,
        cdw(racqa::PREEMPT, rt::WRITE_EXCLUSIVE_ALL_REGS),
        keys(KB, KA),
    )
    .unwrap();
    assert!(t.registrant(&A).is_none());
    assert_eq!(t.role(&B), Role::Holder);
}

#[test]
fn release_and_clear() {
    // A registrant that does not hold: success, no change.
    let mut t = held(rt::WRITE_EXCLUSIVE_REG_ONLY);
    let before = t.clone();
    t.release(
        &B,
        cdw(rrela::RELEASE, rt::WRITE_EXCLUSIVE_REG_ONLY),
        keys(KB, 0),
    )
    .unwrap();
    assert_eq!(t, before);
    // Wrong key or not registered: conflict. Wrong type by the holder: invalid field.
    let r = t.release(
        &A,
        cdw(rrela::RELEASE, rt::WRITE_EXCLUSIVE_REG_ONLY),
        keys(KB, 0),
    );
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    let r = t.release(
        &C,
        cdw(rrela::RELEASE, rt::WRITE_EXCLUSIVE_REG_ONLY),
        keys(0, 0),
    );
    assert_eq!(r, Err(Status::RESERVATION_CONFLICT));
    let r = t.release(&A, cdw(rrela::RELEASE, rt::WRITE_EXCLUSIVE), keys(KA, 0));
    assert_eq!(r, Err(Status::INVALID_FIELD));
    let r = t.release(&A, cdw(7, 0), keys(KA, 0));
    assert_eq!(r, Err(Status::INVALID_FIELD));
    // The holder releases a Registrants Only reservation: the others hear of it.
    let g = t.generation;
    let out = t
        .release(
            &A,
            cdw(rrela::RELEASE, rt::WRITE_EXCLUSIVE_REG_ONLY),
            keys(KA, 0),
        )
        .unwrap();
    assert!(t.reservation.is_none());
    assert_eq!(t.regs.len(), 2, "registrations stay");
    assert_eq!(t.generation, g, "Release does not move the generation");
    assert_eq!(
        out.notices,
        vec![Notice {
            host: B,
            log_type: lt::RESERVATION_RELEASED
        }]
    );
    // Write Exclusive / Exclusive Access: no notification on release.
    let mut t = held(rt::WRITE_EXCLUSIVE);
    let out = t
        .release(&A, cdw(rrela::RELEASE, rt::WRITE_EXCLUSIVE), keys(KA, 0))
        .unwrap();
    assert!(out.notices.is_empty());
    // All Registrants: any registrant releases it for everyone.
    let mut t = held(rt::EXCLUSIVE_ACCESS_ALL_REGS);
    t.release(
        &B,
        cdw(rrela::RELEASE, rt::EXCLUSIVE_ACCESS_ALL_REGS),
        keys(KB, 0),
    )
    .unwrap();
    assert!(t.reservation.is_none());
    // Clear: everything goes, the others are told their reservation was preempted.
    let mut t = held(rt::EXCLUSIVE_ACCESS);
    let g = t.generation;
    let out = t.release(&B, cdw(rrela::CLEAR, 0), keys(KB, 0)).unwrap();
    assert!(t.regs.is_empty() && t.reservation.is_none());
    assert_eq!(t.generation, g + 1);
    assert_eq!(
        out.notices,
        vec![Notice {
            host: A,
            log_type: lt::RESERVATION_PREEMPTED
        }]
    );
}

#[test]
fn unregistering_the_holder() {
    // Registrants Only: released, the others notified.
    let mut t = held(rt::EXCLUSIVE_ACCESS_REG_ONLY);
    let out = t
        .register(&A, cdw(rrega::UNREGISTER, 0), keys(KA, 0), false)
        .unwrap();
    assert!(t.reservation.is_none());
    assert_eq!(out.notices.len(), 1);
    // Write Exclusive: released, nobody notified.
    let mut t = held(rt::WRITE_EXCLUSIVE);
    let out = t
        .register(&A, cdw(rrega::UNREGISTER, 0), keys(KA, 0), false)
        .unwrap();
    assert!(t.reservation.is_none() && out.notices.is_empty());
    // All Registrants: held while any registrant remains.
    let mut t = held(rt::WRITE_EXCLUSIVE_ALL_REGS);
    t.register(&A, cdw(rrega::UNREGISTER, 0), keys(KA, 0), false)
        .unwrap();
    assert!(t.reservation.is_some());
    assert_eq!(t.role(&B), Role::Holder);
    t.register(&B, cdw(rrega::UNREGISTER, 0), keys(KB, 0), false)
        .unwrap();
    assert!(t.reservation.is_none());
}

#[test]
fn report_contents() {
    let t = held(rt::WRITE_EXCLUSIVE);
    let r = t.report();
    assert_eq!(r.generation, 2);
    assert_eq!(r.rtype, rt::WRITE_EXCLUSIVE);
    assert!(!r.ptpls);
    assert_eq!(r.regs.len(), 2);
    assert_eq!(
        (r.regs[0].hostid, r.regs[0].rkey, r.regs[0].holds),
        (A, KA, true)
    );
    assert_eq!(
        (r.regs[1].hostid, r.regs[1].rkey, r.regs[1].holds),
        (B, KB, false)
    );
    assert!(r.regs.iter().all(|e| e.cntlid == 0xFFFF));
    let r = held(rt::EXCLUSIVE_ACCESS_ALL_REGS).report();
    assert!(r.regs.iter().all(|e| e.holds));
    assert_eq!(ResvTable::default().report().rtype, 0);
}

#[test]
fn state_round_trip_and_corruption() {
    let mut t = held(rt::EXCLUSIVE_ACCESS_REG_ONLY);
    t.ptpl = true;
    let s = t.encode_state();
    assert_eq!(ResvTable::decode_state(&s), Ok(t.clone()));
    assert_eq!(
        ResvTable::decode_state(&ResvTable::default().encode_state()),
        Ok(ResvTable::default())
    );
    let lines: Vec<&str> = s.lines().collect();
    let truncated = lines[..lines.len() - 1].join("\n");
    let corrupt = [
        String::new(),
        "garbage".to_string(),
        truncated,
        s.replace("generation 2", "generation x"),
        s.replace("ptpl 1", "ptpl 2"),
        s.replacen("0a0a0a0a", "zz0a0a0a", 1),
        s.replace(&format!("end {}", lines.len() - 1), "end 99"),
        format!("{s}registrant {} 1\n", "c".repeat(32)),
        // The holder's registration removed: inconsistent.
        s.lines()
            .filter(|l| !l.starts_with(&format!("registrant {}", "0a".repeat(16))))
            .collect::<Vec<_>>()
            .join("\n"),
    ];
    for (i, c) in corrupt.iter().enumerate() {
        assert!(
            ResvTable::decode_state(c).is_err(),
            "case {i} accepted: {c:?}"
        );
    }
}

#[test]
fn file_store_saves_atomically_and_loads() {
    let dir = std::env::temp_dir().join(format!("ebof-resv-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ns1.resv");
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        FileStore::load(&path),
        Ok(None),
        "no file: nothing persisted"
    );
    let mut t = held(rt::WRITE_EXCLUSIVE);
    t.ptpl = true;
    FileStore::new(&path).save(&t.encode_state()).unwrap();
    assert!(
        !dir.join("ns1.resv.tmp").exists(),
        "the temporary file was renamed"
    );
    assert_eq!(FileStore::load(&path), Ok(Some(t.clone())));
    // A namespace built from it holds the reservation at once.
    let r = NsReservations::with_store(Arc::new(FileStore::new(&path)), t.clone());
    assert!(r.check(&C, io::WRITE).is_err());
    assert!(r.check(&A, io::WRITE).is_ok());
    // Corrupt file: a clear error naming the file.
    std::fs::write(&path, "ebof-reservations 1\ngeneration 1\n").unwrap();
    let e = FileStore::load(&path).unwrap_err();
    assert!(e.contains("ns1.resv") && e.contains("truncated"), "{e}");
    std::fs::write(&path, [0xFF, 0xFE]).unwrap();
    assert!(FileStore::load(&path).unwrap_err().contains("UTF-8"));
    // PTPL off in the file: nothing survives the restart but the generation.
    t.ptpl = false;
    let r = NsReservations::with_store(Arc::new(FileStore::new(&path)), t);
    assert!(r.snapshot().regs.is_empty());
    assert!(r.check(&C, io::WRITE).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[derive(Debug, Default)]
struct MemStore {
    saved: Mutex<Vec<String>>,
    fail: AtomicBool,
}

impl ResvStore for MemStore {
    fn save(&self, state: &str) -> std::io::Result<()> {
        if self.fail.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("disk full"));
        }
        self.saved.lock().unwrap().push(state.to_string());
        Ok(())
    }
    fn describe(&self) -> String {
        "memory".into()
    }
}

#[test]
fn namespace_persists_only_with_ptpl_and_a_failed_save_changes_nothing() {
    let store = Arc::new(MemStore::default());
    let r = NsReservations::with_store(store.clone(), ResvTable::default());
    assert!(r.ptpl_capable());
    assert!(!NsReservations::default().ptpl_capable());
    // PTPL off: nothing saved.
    r.update(|t| t.register(&A, cdw(rrega::REGISTER, 0), keys(0, KA), true))
        .unwrap();
    assert!(store.saved.lock().unwrap().is_empty());
    // PTPL switched on: saved, and every change after.
    let mut on = cdw(rrega::REGISTER, 0);
    on.cptpl = cptpl::SET;
    r.update(|t| t.register(&A, on, keys(0, KA), true)).unwrap();
    r.update(|t| t.acquire(&A, cdw(racqa::ACQUIRE, rt::WRITE_EXCLUSIVE), keys(KA, 0)))
        .unwrap();
    let saved = store.saved.lock().unwrap().clone();
    assert_eq!(saved.len(), 2);
    assert_eq!(ResvTable::decode_state(&saved[1]).unwrap(), r.snapshot());
    // A failing save: Internal Error, the reservation stays as it was.
    store.fail.store(true, Ordering::Relaxed);
    let before = r.snapshot();
    let e = r.update(|t| t.release(&A, cdw(rrela::RELEASE, rt::WRITE_EXCLUSIVE), keys(KA, 0)));
    assert_eq!(e, Err(Status::INTERNAL));
    assert_eq!(r.snapshot(), before);
    assert!(r.check(&C, io::WRITE).is_err(), "still reserved");
}

#[test]
fn fast_path_flag_follows_the_reservation() {
    let r = NsReservations::default();
    assert!(r.check(&C, io::WRITE).is_ok());
    r.update(|t| t.register(&A, cdw(rrega::REGISTER, 0), keys(0, KA), false))
        .unwrap();
    assert!(
        !r.active.load(Ordering::Relaxed),
        "a registration alone is not a reservation"
    );
    r.update(|t| t.acquire(&A, cdw(racqa::ACQUIRE, rt::EXCLUSIVE_ACCESS), keys(KA, 0)))
        .unwrap();
    assert!(r.active.load(Ordering::Relaxed));
    assert_eq!(r.check(&C, io::READ), Err(Status::RESERVATION_CONFLICT));
    r.update(|t| t.release(&A, cdw(rrela::RELEASE, rt::EXCLUSIVE_ACCESS), keys(KA, 0)))
        .unwrap();
    assert!(!r.active.load(Ordering::Relaxed));
}

/// A mirror's replica: records what it was asked, and what a push would read meanwhile.
#[derive(Debug)]
struct Replica {
    ns: std::sync::Weak<NsReservations>,
    answer: Result<(), Status>,
    seen: Mutex<Vec<(ResvTable, ResvTable)>>,
}

impl ResvReplica for Replica {
    fn replicate(&self, next: &ResvTable) -> Result<(), Status> {
        let ns = self.ns.upgrade().unwrap();
        // The push reads the table being replicated, while I/O still checks the current one.
        assert_eq!(ns.snapshot().generation + 1, next.generation);
        self.seen
            .lock()
            .unwrap()
            .push((next.clone(), ns.replication_state()));
        self.answer
    }
}

#[test]
fn changes_reach_the_replica_before_they_take_effect() {
    for answer in [Ok(()), Err(Status::ANA_INACCESSIBLE)] {
        let ns = Arc::new(NsReservations::default());
        let r = Arc::new(Replica {
            ns: Arc::downgrade(&ns),
            answer,
            seen: Mutex::new(Vec::new()),
        });
        ns.set_replica(r.clone());
        let res = ns.update(|t| t.register(&A, cdw(rrega::REGISTER, 0), keys(0, KA), false));
        assert_eq!(res.map(|_| ()), answer);
        let seen = r.seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].0, seen[0].1,
            "a push reads the table being replicated"
        );
        assert_eq!(seen[0].0.regs, vec![Registrant { host: A, key: KA }]);
        let now = ns.snapshot();
        match answer {
            Ok(()) => assert_eq!(now, seen[0].0),
            Err(_) => assert_eq!(now, ResvTable::default(), "refused: nothing changed"),
        }
        assert_eq!(ns.replication_state(), now, "nothing pending afterwards");
        // No change, no replication.
        let _ = ns.update(|_| Ok(Outcome::default()));
        assert_eq!(r.seen.lock().unwrap().len(), 1);
    }
}

#[test]
fn install_replaces_the_table_without_replicating() {
    let ns = NsReservations::default();
    let r = Arc::new(Replica {
        ns: std::sync::Weak::new(),
        answer: Ok(()),
        seen: Mutex::new(Vec::new()),
    });
    ns.set_replica(r.clone());
    let t = held(rt::WRITE_EXCLUSIVE);
    ns.install(t.clone()).unwrap();
    assert_eq!(ns.snapshot(), t);
    assert!(ns.in_use());
    assert_eq!(ns.check(&C, io::WRITE), Err(Status::RESERVATION_CONFLICT));
    assert_eq!(ns.check(&A, io::WRITE), Ok(()));
    assert!(r.seen.lock().unwrap().is_empty());
    // The image round trip is the identity.
    assert_eq!(ResvTable::from_image(t.to_image()), t);
    ns.install(ResvTable::default()).unwrap();
    assert!(!ns.in_use());
    assert_eq!(ns.check(&C, io::WRITE), Ok(()));
}
