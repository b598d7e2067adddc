//! Property test: a random sequence of operations, resizes included, gives the same results on
//! every backend as on a plain `Vec<u8>` model (and therefore the same results on RAM and file).

mod common;

use common::{Fixture, assert_matches, block_on_file, file, pattern, ram};
use ebof_backend::{BackendError, BackendKind};
use proptest::prelude::*;

/// A few pages plus a partial one, so ops hit page boundaries often.
const SIZE: u64 = 5 * 4096 + 1024;

#[derive(Clone, Debug)]
enum Op {
    Write {
        offset: u64,
        len: u64,
        seed: u64,
    },
    Read {
        offset: u64,
        len: u64,
    },
    WriteZeroes {
        offset: u64,
        len: u64,
    },
    Deallocate {
        offset: u64,
        len: u64,
    },
    Flush,
    /// Valid sizes are at most `SIZE`, so that the block backend (a `SIZE`-byte file) accepts
    /// them too; invalid ones (zero, not a multiple of 512) change nothing anywhere.
    Resize {
        size: u64,
    },
}

/// Offsets mostly inside, sometimes near or past the end, occasionally absurd.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0..SIZE,
        2 => (0..16u64).prop_map(|k| k * 4096 - 4096 / 2 * (k % 2)),
        1 => SIZE - 64..SIZE + 64,
        1 => Just(u64::MAX - 1),
    ]
}

fn len() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0..600u64,
        3 => 0..3 * 4096u64,
        1 => Just(4096u64),
        1 => 0..SIZE + 1,
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (offset(), len(), any::<u64>()).prop_map(|(offset, len, seed)| Op::Write { offset, len, seed }),
        3 => (offset(), len()).prop_map(|(offset, len)| Op::Read { offset, len }),
        2 => (offset(), len()).prop_map(|(offset, len)| Op::WriteZeroes { offset, len }),
        2 => (offset(), len()).prop_map(|(offset, len)| Op::Deallocate { offset, len }),
        1 => Just(Op::Flush),
        1 => prop_oneof![
            6 => (1..=SIZE / 512).prop_map(|blocks| blocks * 512),
            1 => Just(0u64),
            1 => (1..SIZE).prop_filter("not a multiple of 512", |s| s % 512 != 0),
        ]
        .prop_map(|size| Op::Resize { size }),
    ]
}

/// The model's range, or `None` where every backend must answer `OutOfRange`.
fn range(offset: u64, len: u64, size: u64) -> Option<std::ops::Range<usize>> {
    let end = offset.checked_add(len).filter(|end| *end <= size)?;
    Some(offset as usize..end as usize)
}

fn check_outcome(fixture: &Fixture, op: &Op, result: Result<(), BackendError>, in_range: bool) {
    match (result, in_range) {
        (Ok(()), true) => {}
        (Err(BackendError::OutOfRange { .. }), false) => {}
        (other, _) => panic!("{}: {op:?}: unexpected {other:?}", fixture.name),
    }
}

fn run(fixture: &Fixture, ops: &[Op]) {
    let backend = &*fixture.backend;
    // The whole device (`SIZE` bytes); the backend exposes `model[..size]`.
    let mut model = vec![0u8; SIZE as usize];
    let mut size = SIZE;
    for op in ops {
        match *op {
            Op::Write { offset, len, seed } => {
                let data = pattern(seed, len.min(SIZE) as usize);
                let r = range(offset, data.len() as u64, size);
                check_outcome(fixture, op, backend.write(offset, &data), r.is_some());
                if let Some(r) = r {
                    model[r].copy_from_slice(&data);
                }
            }
            Op::Read { offset, len } => {
                let mut buf = vec![0xa5; len.min(SIZE) as usize];
                let r = range(offset, buf.len() as u64, size);
                check_outcome(fixture, op, backend.read(offset, &mut buf), r.is_some());
                if let Some(r) = r {
                    assert!(
                        buf == model[r],
                        "{}: {op:?} differs from the model",
                        fixture.name
                    );
                }
            }
            Op::WriteZeroes { offset, len } | Op::Deallocate { offset, len } => {
                let result = if matches!(op, Op::WriteZeroes { .. }) {
                    backend.write_zeroes(offset, len)
                } else {
                    backend.deallocate(offset, len)
                };
                let r = range(offset, len, size);
                check_outcome(fixture, op, result, r.is_some());
                if let Some(r) = r {
                    model[r].fill(0);
                }
            }
            Op::Flush => backend.flush().expect("flush"),
            Op::Resize { size: new } => match backend.resize(new) {
                Ok(()) => {
                    assert!(
                        new != 0 && new % 512 == 0,
                        "{}: {op:?} accepted",
                        fixture.name
                    );
                    // RAM and file discard what a shrink cuts off; a block backend only hides
                    // it.
                    if new < size && backend.kind() != BackendKind::Block {
                        model[new as usize..].fill(0);
                    }
                    size = new;
                    assert_eq!(backend.size(), size, "{}: {op:?}", fixture.name);
                }
                Err(BackendError::InvalidSize { .. }) if new == 0 || new % 512 != 0 => {
                    assert_eq!(backend.size(), size, "{}: {op:?}", fixture.name);
                }
                Err(e) => panic!("{}: {op:?}: {e}", fixture.name),
            },
        }
    }
    assert_matches(fixture, &model[..size as usize], "after the sequence");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn backends_agree_with_a_byte_vector(ops in proptest::collection::vec(op(), 1..40)) {
        for fixture in [ram(SIZE), file(SIZE), block_on_file(SIZE)] {
            run(&fixture, &ops);
        }
    }
}
