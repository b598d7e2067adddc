//! Arbitrary input never panics; generated valid configurations round-trip.

use ebof_config::{
    BackendChoice, Config, Namespace, codes, parse_core_list, parse_listener, parse_size,
};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn parsers_never_panic(s in "\\PC*") {
        let _ = parse_size(&s);
        let _ = parse_core_list(&s);
        let _ = parse_listener(&s, 4420);
        let _ = ebof_config::check_nqn(&s);
        let _ = Config::from_toml_str(&s);
    }

    #[test]
    fn parsers_never_panic_on_near_misses(
        n in any::<u64>(),
        unit in prop::sample::select(vec!["", "B", "k", "K", "KiB", "M", "MiB", "G", "GiB", "T", "TiB", "P", "PiB", "GB", "X", ".5G", " G"]),
        a in 0u32..20000, b in 0u32..20000,
    ) {
        if let Ok(v) = parse_size(&format!("{n}{unit}")) {
            prop_assert!(v >= n);
        }
        if let Ok(cores) = parse_core_list(&format!("{a}-{b},{b}")) {
            prop_assert!(cores.windows(2).all(|w| w[0] < w[1]));
        }
        let _ = parse_listener(&format!("[::{a:x}]:{b}"), 1);
        let _ = parse_listener(&format!("1.2.3.{a}:{b}"), 1);
    }

    #[test]
    fn toml_like_garbage_never_panics(
        lines in prop::collection::vec(
            prop::sample::select(vec![
                "[target]", "[[listeners]]", "[discovery]", "[[subsystems]]", "[[subsystems.namespaces]]",
                "address = \"127.0.0.1\"", "address = \"::\"", "port = 4420", "port = -1", "port = 1e9",
                "nqn = \"nqn.a:b\"", "nqn = \"nqn.a:c\"", "nqn = 5", "backend = \"ram\"", "backend = \"file\"",
                "backend = \"block\"", "size = \"1G\"", "size = 512", "size = \"99999999999T\"", "size = []",
                "path = \"/x\"", "path = \"\"", "nsid = 1", "nsid = 0", "nsid = 4294967295", "block_size = 4096",
                "uuid = \"0b6b6f2e-5d1c-4b8e-9a51-3f0c2d7e8a14\"", "uuid = \"x\"", "cores = \"0-3\"", "cores = [1, 1]",
                "cores = [\"a\"]", "hosts = [\"nqn.h:1\"]", "allow_any_host = false", "serial = \"\"", "model = \"m\"",
                "io_inline_data = 4096", "max_queue_size = 65535", "bogus = 1", "[", "= =", "x.y.z = 1",
                "[[pools]]", "name = \"fast\"", "name = \"a b\"", "directory = \"/x\"",
                "directory = \"x\"", "pool = \"fast\"", "pool = \"slow\"", "path = \"/x/a.img\"",
            ]),
            0..24,
        )
    ) {
        let text = lines.join("\n");
        match Config::from_toml_str(&text) {
            Ok(c) => {
                c.validate().unwrap();
                prop_assert_eq!(Config::from_toml_str(&c.to_toml_string()).unwrap(), c);
            }
            Err(e) => {
                prop_assert!(!e.code.is_empty());
                prop_assert!(!e.message.is_empty());
            }
        }
    }

    #[test]
    fn generated_configs_round_trip(
        sizes in prop::collection::vec((1u64..1 << 40, any::<bool>(), any::<bool>()), 1..5),
        cores in prop::option::of(prop::collection::btree_set(0usize..64, 1..8)),
        // Not 8009: the embedded default's discovery listener has that port.
        port in any::<u16>().prop_filter("discovery port", |p| *p != 8009),
        inline in (256u32..=8192).prop_map(|x| x * 16),
    ) {
        let mut c = Config::embedded_default();
        c.listeners[0].port = port;
        c.target.cores = cores.map(|s| s.into_iter().collect());
        c.target.io_inline_data = inline;
        c.subsystems[0].namespaces = sizes
            .iter()
            .enumerate()
            .map(|(i, &(blocks, big, file))| {
                let block_size = if big { 4096 } else { 512 };
                let size = blocks.saturating_mul(block_size as u64);
                let backend = if file {
                    BackendChoice::File { path: format!("/tmp/ns{i}.img").into(), size: Some(size) }
                } else {
                    BackendChoice::Ram { size }
                };
                let mut ns = Namespace::with_defaults(&c.subsystems[0].nqn, i as u32 + 1, backend);
                ns.block_size = block_size;
                ns
            })
            .collect();
        if let Err(e) = c.validate() {
            // Only the saturated size may be off the block grid.
            prop_assert_eq!(e.code, codes::INVALID_SIZE);
            return Ok(());
        }
        let text = c.to_toml_string();
        prop_assert_eq!(Config::from_toml_str(&text).unwrap(), c);
    }
}
