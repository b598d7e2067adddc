//! `O_DIRECT` file backends: aligned I/O through the synchronous calls (the worker-pool path)
//! reads back what was written, misaligned I/O is an error (not a panic, not silent data),
//! zeroing works through the aligned zero buffer, and `raw_io` tells the engine the
//! granularity. Skipped, with the reason, where the file system refuses `O_DIRECT`.

use ebof_backend::{BackendError, BackendOptions, BackendSpec, open_with};

#[test]
fn direct_file_backend_round_trips_aligned_io() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let spec = BackendSpec::File {
        path: dir.path().join("d.img"),
        size: Some(1 << 20),
    };
    let b = match open_with(&spec, BackendOptions { direct: true }) {
        Ok(b) => b,
        Err(e) => {
            println!("skipped: this file system refuses O_DIRECT ({e})");
            return;
        }
    };
    let g = u64::from(
        b.raw_io()
            .and_then(|r| r.direct)
            .expect("direct granularity"),
    );
    assert!(g.is_power_of_two() && g >= 512, "granularity {g}");
    let plain = ebof_backend::open(&spec).unwrap();
    assert_eq!(plain.raw_io().and_then(|r| r.direct), None);

    let data: Vec<u8> = (0..3 * g as usize).map(|i| (i % 251) as u8 + 1).collect();
    b.write(g, &data).unwrap();
    let mut back = vec![0u8; data.len()];
    b.read(g, &mut back).unwrap();
    assert_eq!(back, data);
    // The buffered view of the same file sees it (O_DIRECT wrote through).
    plain.read(g, &mut back).unwrap();
    assert_eq!(back, data);

    if g > 1 {
        let mut one = [0u8; 1];
        assert!(matches!(b.read(g + 1, &mut one), Err(BackendError::Io(_))));
    }
    b.write_zeroes(2 * g, g).unwrap();
    b.deallocate(3 * g, g).unwrap();
    b.read(g, &mut back).unwrap();
    assert_eq!(&back[..g as usize], &data[..g as usize]);
    assert!(back[g as usize..].iter().all(|&x| x == 0));
    b.flush().unwrap();
}
