//! `[[listeners]] transport` and `--listen rdma:…`.

use ebof_config::{Config, Overrides, Transport, codes};

const SUB: &str = "[[subsystems]]\nnqn = \"nqn.2026-11.io.ebof:t\"\n[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"64MiB\"\n";

#[test]
fn rdma_listeners_parse_emit_and_reparse() {
    let text = format!(
        "[[listeners]]\naddress = \"10.0.0.1\"\nport = 4420\ntransport = \"rdma\"\n\n\
         [[listeners]]\naddress = \"10.0.0.1\"\nport = 4421\n\n\
         [discovery]\naddress = \"10.0.0.1\"\nport = 8009\ntransport = \"rdma\"\n{SUB}"
    );
    let c = Config::from_toml_str(&text).unwrap();
    assert_eq!(c.transport(&c.listeners[0]), Transport::Rdma);
    assert_eq!(c.transport(&c.listeners[1]), Transport::Tcp);
    assert_eq!(c.transport(c.discovery.as_ref().unwrap()), Transport::Rdma);
    let again = Config::from_toml_str(&c.to_toml_string()).unwrap();
    assert_eq!(again, c, "saved configuration keeps the transports");
}

#[test]
fn bad_transports_are_refused_with_their_path() {
    let e = Config::from_toml_str(&format!(
        "[[listeners]]\naddress = \"10.0.0.1\"\ntransport = \"roce\"\n{SUB}"
    ))
    .unwrap_err();
    assert_eq!(
        (e.code, e.path.as_str()),
        (codes::INVALID_TRANSPORT, "listeners[0].transport")
    );
    let e = Config::from_toml_str(&format!(
        "[[listeners]]\naddress = \"10.0.0.1\"\ntransport = \"rdma\"\ntls = \"required\"\n{SUB}"
    ))
    .unwrap_err();
    assert_eq!(
        (e.code, e.path.as_str()),
        (codes::INVALID_TRANSPORT, "listeners[0].tls")
    );
    assert!(e.to_string().contains("NVMe/TCP"), "{e}");
}

#[test]
fn listen_option_takes_a_transport_prefix() {
    let mut c =
        Config::from_toml_str(&format!("[[listeners]]\naddress = \"10.0.0.9\"\n{SUB}")).unwrap();
    let o = Overrides {
        listen: vec![
            "rdma:10.0.0.2:4420".into(),
            "tcp:10.0.0.2:4421".into(),
            "10.0.0.2:4422".into(),
        ],
        ..Default::default()
    };
    c.apply_overrides(&o).unwrap();
    let t: Vec<_> = c
        .listeners
        .iter()
        .map(|l| (l.port, c.transport(l)))
        .collect();
    assert_eq!(
        t,
        [
            (4420, Transport::Rdma),
            (4421, Transport::Tcp),
            (4422, Transport::Tcp)
        ]
    );
}
