//! Arbitrary values in a valid configuration skeleton, then arbitrary command-line overrides.
//!
//! The input drives [`arbitrary::Unstructured`]: which tables and keys of the schema appear
//! (plus, now and then, an unknown key), and each value — usually one that is plausible for
//! the key (sizes with units, NQNs, addresses, core lists, block sizes...), sometimes an
//! arbitrary TOML value of any type. The document is built as a `toml` table and serialized,
//! so it is always syntactically valid TOML: the parser's typed conversion and the validation
//! are what get exercised. Then `Overrides` with arbitrary strings are applied.
//!
//! Checked as in [`super::config_text`], and: a rejected override leaves the configuration
//! unchanged; an accepted one leaves it valid.

use super::config_text::{check_accepted, check_error, check_text};
use crate::Features;
use arbitrary::{Result, Unstructured};
use ebof_config::Overrides;
use toml::{Table, Value};

const F_OVERRIDE: u8 = 23;

/// One input: a configuration built from the bytes, then overrides (see the module docs).
pub fn run(data: &[u8], feat: &mut Features) {
    let mut u = Unstructured::new(data);
    let Ok(doc) = document(&mut u) else {
        return;
    };
    let text = toml::to_string(&doc).unwrap_or_default();
    let Some(mut c) = check_text(&text, feat) else {
        return;
    };
    let Ok(o) = overrides(&mut u) else {
        return;
    };
    let before = c.clone();
    match c.apply_overrides(&o) {
        Ok(()) => {
            check_accepted(&c);
            feat.add(F_OVERRIDE, 1);
        }
        Err(e) => {
            check_error(&e, feat);
            assert_eq!(c, before, "a rejected override changed the configuration");
        }
    }
}

fn document(u: &mut Unstructured<'_>) -> Result<Table> {
    let mut doc = Table::new();
    if u.ratio(1, 2)? {
        doc.insert("target".into(), Value::Table(target(u)?));
    }
    let n = u.int_in_range(0..=3)?;
    let listeners = (0..n)
        .map(|_| listener(u).map(Value::Table))
        .collect::<Result<Vec<_>>>()?;
    if n > 0 || u.ratio(1, 8)? {
        doc.insert("listeners".into(), Value::Array(listeners));
    }
    if u.ratio(1, 3)? {
        doc.insert("discovery".into(), Value::Table(listener(u)?));
    }
    let n = u.int_in_range(0..=3)?;
    let subsystems = (0..n)
        .map(|_| subsystem(u).map(Value::Table))
        .collect::<Result<Vec<_>>>()?;
    if n > 0 || u.ratio(1, 8)? {
        doc.insert("subsystems".into(), Value::Array(subsystems));
    }
    stray(u, &mut doc)?;
    Ok(doc)
}

/// Now and then a key the schema does not know.
fn stray(u: &mut Unstructured<'_>, t: &mut Table) -> Result<()> {
    if u.ratio(1, 16)? {
        let k = *u.choose(&["bogus", "Port", "namespace", "cores ", ""])?;
        t.insert(k.into(), any_value(u, 0)?);
    }
    Ok(())
}

/// Insert `key` with probability 3/4: a plausible value (from `good`) or, one time in five,
/// an arbitrary one.
fn maybe(
    u: &mut Unstructured<'_>,
    t: &mut Table,
    key: &str,
    good: impl FnOnce(&mut Unstructured<'_>) -> Result<Value>,
) -> Result<()> {
    if u.ratio(1, 4)? {
        return Ok(());
    }
    let v = if u.ratio(1, 5)? {
        any_value(u, 0)?
    } else {
        good(u)?
    };
    t.insert(key.into(), v);
    Ok(())
}

fn target(u: &mut Unstructured<'_>) -> Result<Table> {
    let mut t = Table::new();
    maybe(u, &mut t, "cores", |u| {
        Ok(if u.ratio(1, 2)? {
            Value::String(pick(
                u,
                &["0", "0-1", "0,1", "1-0", "0-3,8", "", "a", "0-99999"],
            )?)
        } else {
            let n = u.int_in_range(0..=4)?;
            Value::Array(
                (0..n)
                    .map(|_| Ok(Value::Integer(i64::from(u.int_in_range(-1..=70)?))))
                    .collect::<Result<_>>()?,
            )
        })
    })?;
    for key in [
        "io_inline_data",
        "max_h2c_data",
        "c2h_data_max",
        "max_io_queues",
        "max_namespaces",
        "max_queue_size",
        "handshake_timeout_ms",
        "max_connections",
        "max_connections_per_address",
        "io_threads",
    ] {
        maybe(u, &mut t, key, |u| Ok(Value::Integer(plausible_int(u)?)))?;
    }
    maybe(u, &mut t, "serial_prefix", |u| {
        Ok(Value::String(pick(
            u,
            &["EBOF", "", "X".repeat(21).as_str(), "é"],
        )?))
    })?;
    maybe(u, &mut t, "ram_huge_pages", |u| {
        Ok(Value::Boolean(u.arbitrary()?))
    })?;
    maybe(u, &mut t, "io_engine", |u| {
        Ok(Value::String(pick(
            u,
            &["io_uring", "threads", "spdk", ""],
        )?))
    })?;
    stray(u, &mut t)?;
    Ok(t)
}

fn listener(u: &mut Unstructured<'_>) -> Result<Table> {
    let mut t = Table::new();
    maybe(u, &mut t, "address", |u| {
        Ok(Value::String(pick(
            u,
            &[
                "127.0.0.1",
                "::1",
                "0.0.0.0",
                "::",
                "localhost",
                "1.2.3",
                "[::1]",
                "127.0.0.1:4420",
            ],
        )?))
    })?;
    maybe(u, &mut t, "port", |u| {
        Ok(Value::Integer(
            *u.choose(&[4420, 8009, 0, 65535, 65536, -1, 4421])?,
        ))
    })?;
    stray(u, &mut t)?;
    Ok(t)
}

fn subsystem(u: &mut Unstructured<'_>) -> Result<Table> {
    let mut t = Table::new();
    maybe(u, &mut t, "nqn", |u| Ok(Value::String(nqn(u)?)))?;
    maybe(u, &mut t, "serial", |u| {
        Ok(Value::String(pick(
            u,
            &[
                "S1",
                "",
                "EBOF-RESTRICTED-01",
                "X".repeat(21).as_str(),
                "\u{7f}",
            ],
        )?))
    })?;
    maybe(u, &mut t, "model", |u| {
        Ok(Value::String(pick(
            u,
            &["ebof", "", "M".repeat(41).as_str()],
        )?))
    })?;
    maybe(u, &mut t, "allow_any_host", |u| {
        Ok(Value::Boolean(u.arbitrary()?))
    })?;
    maybe(u, &mut t, "hosts", |u| {
        let n = u.int_in_range(0..=3)?;
        Ok(Value::Array(
            (0..n)
                .map(|_| nqn(u).map(Value::String))
                .collect::<Result<_>>()?,
        ))
    })?;
    let n = u.int_in_range(0..=3)?;
    if n > 0 || u.ratio(1, 8)? {
        let ns = (0..n)
            .map(|_| namespace(u).map(Value::Table))
            .collect::<Result<Vec<_>>>()?;
        t.insert("namespaces".into(), Value::Array(ns));
    }
    stray(u, &mut t)?;
    Ok(t)
}

fn namespace(u: &mut Unstructured<'_>) -> Result<Table> {
    let mut t = Table::new();
    maybe(u, &mut t, "nsid", |u| {
        Ok(Value::Integer(*u.choose(&[
            1, 2, 3, 0, -1, 4294967294, 4294967295, 4294967296,
        ])?))
    })?;
    maybe(u, &mut t, "backend", |u| {
        Ok(Value::String(pick(
            u,
            &["ram", "file", "block", "RAM", ""],
        )?))
    })?;
    maybe(u, &mut t, "size", |u| {
        Ok(if u.ratio(1, 2)? {
            Value::String(pick(
                u,
                &[
                    "1G",
                    "512",
                    "1M",
                    "0",
                    "1.5G",
                    "16E",
                    "99999999999T",
                    "4K",
                    "1KiB",
                    "-1",
                    " 1G",
                ],
            )?)
        } else {
            Value::Integer(plausible_int(u)?)
        })
    })?;
    maybe(u, &mut t, "path", |u| {
        Ok(Value::String(pick(
            u,
            &["/tmp/ebof-fuzz.img", "", "a\0b", "/dev/null", "rel/path"],
        )?))
    })?;
    maybe(u, &mut t, "direct", |u| Ok(Value::Boolean(u.arbitrary()?)))?;
    maybe(u, &mut t, "block_size", |u| {
        Ok(Value::Integer(
            *u.choose(&[512, 4096, 0, 1024, 8192, -512])?,
        ))
    })?;
    maybe(u, &mut t, "uuid", |u| {
        Ok(Value::String(pick(
            u,
            &[
                "0b6b6f2e-5d1c-4b8e-9a51-3f0c2d7e8a14",
                "00000000-0000-0000-0000-000000000000",
                "x",
                "0b6b6f2e5d1c4b8e9a513f0c2d7e8a14",
            ],
        )?))
    })?;
    stray(u, &mut t)?;
    Ok(t)
}

fn nqn(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(1, 4)? {
        return u.arbitrary();
    }
    pick(
        u,
        &[
            "nqn.2026-11.io.ebof:a",
            "nqn.2026-11.io.ebof:b",
            "nqn.2014-08.org.nvmexpress.discovery",
            "nqn.2014-08.org.nvmexpress:uuid:5b4d2f0e-8c3a-4f6e-9d12-7a8b9c0d1e2f",
            "nqn.",
            "iqn.2026-11.x:y",
            "",
        ],
    )
}

fn pick(u: &mut Unstructured<'_>, options: &[&str]) -> Result<String> {
    if u.ratio(1, 8)? {
        return u.arbitrary();
    }
    Ok((*u.choose(options)?).to_string())
}

fn plausible_int(u: &mut Unstructured<'_>) -> Result<i64> {
    Ok(match u.int_in_range(0..=3)? {
        0 => *u.choose(&[
            0,
            1,
            2,
            16,
            32,
            128,
            4096,
            8192,
            65535,
            65536,
            131072,
            1 << 20,
        ])?,
        1 => i64::from(u.int_in_range(0u32..=1 << 24)?) * 16,
        2 => *u.choose(&[-1, i64::MIN, i64::MAX, u32::MAX as i64, 1 << 40])?,
        _ => u.arbitrary()?,
    })
}

/// Any TOML value (nested at most two deep).
fn any_value(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    let kinds = if depth >= 2 { 4 } else { 6 };
    Ok(match u.int_in_range(0..=kinds - 1)? {
        0 => Value::String(u.arbitrary()?),
        1 => Value::Integer(u.arbitrary()?),
        2 => Value::Float(u.arbitrary()?),
        3 => Value::Boolean(u.arbitrary()?),
        4 => {
            let n = u.int_in_range(0..=3)?;
            Value::Array(
                (0..n)
                    .map(|_| any_value(u, depth + 1))
                    .collect::<Result<_>>()?,
            )
        }
        _ => {
            let mut t = Table::new();
            for _ in 0..u.int_in_range(0..=3)? {
                t.insert(u.arbitrary()?, any_value(u, depth + 1)?);
            }
            Value::Table(t)
        }
    })
}

fn overrides(u: &mut Unstructured<'_>) -> Result<Overrides> {
    let opt = |u: &mut Unstructured<'_>, good: &[&str]| -> Result<Option<String>> {
        Ok(if u.ratio(1, 2)? {
            None
        } else {
            Some(pick(u, good)?)
        })
    };
    let n = u.int_in_range(0..=2)?;
    let listen = (0..n)
        .map(|_| {
            pick(
                u,
                &[
                    "127.0.0.1:4420",
                    "[::1]:4421",
                    "0.0.0.0",
                    "1.2.3.4:99999",
                    ":",
                ],
            )
        })
        .collect::<Result<_>>()?;
    Ok(Overrides {
        listen,
        discovery_listen: opt(u, &["127.0.0.1:8009", "127.0.0.1", "x"])?,
        ram: opt(u, &["1G", "4K", "0", "1P"])?,
        file: opt(u, &["/tmp/ebof-fuzz-override.img", ""])?.map(Into::into),
        nqn: opt(
            u,
            &[
                "nqn.2026-11.io.ebof:o",
                "nqn.2014-08.org.nvmexpress.discovery",
                "bad",
            ],
        )?,
        cores: opt(u, &["0", "0-1", "5-2", ""])?,
        io_engine: opt(u, &["io_uring", "threads", "aio", ""])?,
    })
}
