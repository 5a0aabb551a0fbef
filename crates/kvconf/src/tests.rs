//! Unit tests of the configuration files.

use super::*;

fn memif() -> Config {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/memif.json"
    ))
    .expect("configs/memif.json");
    Config::parse(&text).expect("valid default config")
}

#[test]
fn default_config_parses() {
    let c = memif();
    assert_eq!(c.dataplane.port, "net_memif0");
    assert!(!c.clients.is_empty());
}

#[test]
fn every_shipped_config_parses() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../configs");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "json") {
            Config::load(&p).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    // Other JSON files (the Grafana dashboard) live in subdirectories.
    assert!(n >= 3, "expected memif, tap and nic configs");
}

#[test]
fn eal_args_fallback_without_hugepages() {
    let c = memif();
    let a = c.dataplane.eal_args("dataplane", false, DEFAULT_MTU);
    assert!(a.contains(&"--no-huge".to_string()));
    assert!(a.iter().any(|x| x.starts_with("--vdev=net_memif0")));
    let a = c.dataplane.eal_args("dataplane", true, DEFAULT_MTU);
    assert!(!a.contains(&"--no-huge".to_string()));
}

#[test]
fn rejects_typos_and_bad_values() {
    let good = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/memif.json"
    ))
    .unwrap();
    let typo = good.replacen("\"lcores\"", "\"lcore\"", 1);
    assert!(Config::parse(&typo).is_err());
    let bad_mac = good.replacen("02:00:00:00:00:01", "02:00:00:00:01", 1);
    assert!(Config::parse(&bad_mac).is_err());
}

#[test]
fn overrides_replace_only_what_is_given() {
    let orig = memif();
    let mut c = orig.clone();
    c.apply_overrides(Role::Pktgen, &Overrides::default());
    assert_eq!(
        serde_json::to_value(&c).unwrap(),
        serde_json::to_value(&orig).unwrap(),
        "no flags, no change"
    );
    let o = Overrides {
        vdev: Some("net_memif0,role=client,socket=/tmp/x.sock".into()),
        file_prefix: Some("kvd-test".into()),
        lcores: Some("1".into()),
        mem_mb: None,
    };
    c.apply_overrides(Role::Pktgen, &o);
    assert_eq!(
        c.pktgen.vdevs[0],
        "net_memif0,role=client,socket=/tmp/x.sock"
    );
    assert_eq!(c.pktgen.vdevs.len(), orig.pktgen.vdevs.len());
    assert_eq!(c.pktgen.vdevs[1..], orig.pktgen.vdevs[1..]);
    assert_eq!(c.pktgen.file_prefix, "kvd-test");
    assert_eq!(c.pktgen.lcores, "1");
    assert_eq!(c.engine.mem_mb, orig.engine.mem_mb);
    // The other process is untouched.
    assert_eq!(
        serde_json::to_value(&c.dataplane).unwrap(),
        serde_json::to_value(&orig.dataplane).unwrap()
    );
}

#[test]
fn overrides_of_the_dataplane_and_engine() {
    let mut c = memif();
    c.dataplane.vdevs.clear();
    let o = Overrides {
        vdev: Some("net_tap0".into()),
        mem_mb: Some(64),
        ..Overrides::default()
    };
    c.apply_overrides(Role::Dataplane, &o);
    assert_eq!(c.dataplane.vdevs, ["net_tap0"], "added when there was none");
    assert_eq!(c.engine.mem_mb, 64);
    assert_eq!(c.pktgen.vdevs, memif().pktgen.vdevs);
    c.process_mut(Role::Pktgen).lcores = "7".into();
    assert_eq!(c.pktgen.lcores, "7");
}

#[test]
fn mtu_is_checked_and_sizes_the_buffers() {
    let mut c = memif();
    assert_eq!(c.server.mtu, DEFAULT_MTU);
    assert_eq!(mbuf_data_room(DEFAULT_MTU), 2048 + MBUF_HEADROOM);
    assert_eq!(request_payload_capacity(MAX_MTU), 8940);
    // A jumbo frame (9014 B + a VLAN tag) fits one mbuf.
    assert_eq!(mbuf_data_room(MAX_MTU), 9216 + MBUF_HEADROOM);
    for bad in [0u16, 575, 9001] {
        c.server.mtu = bad;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("server.mtu must be in 576..=9000"), "{e}");
    }
    // 1 MiB / 32 = 32 KiB slots hold a jumbo request; 1 MiB / 256 = 4 KiB do not.
    c.server.mtu = MAX_MTU;
    c.validate().unwrap();
    c.server.credits = 256;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("8940 B of a full request at MTU 9000"), "{e}");
    let text = serde_json::to_string(&memif())
        .unwrap()
        .replace("\"mtu\":1500", "\"mtu\":9000");
    assert_eq!(Config::parse(&text).unwrap().server.mtu, 9000);
    // Memif's buffers follow the mbufs; other vdevs and MTU 1500 are left alone.
    let m = "net_memif0,role=server,id=0";
    assert_eq!(memif_vdev(m, DEFAULT_MTU), m);
    assert_eq!(memif_vdev(m, MAX_MTU), format!("{m},bsize=9216"));
    assert_eq!(
        memif_vdev(&format!("{m},bsize=16384"), MAX_MTU),
        format!("{m},bsize=16384")
    );
    assert_eq!(memif_vdev("net_tap0", MAX_MTU), "net_tap0");
    let mut c = memif();
    c.server.mtu = MAX_MTU;
    let a = c.pktgen.eal_args("pktgen", false, c.server.mtu);
    assert!(a
        .iter()
        .any(|x| x.starts_with("--vdev=net_memif0") && x.ends_with(",bsize=9216")));
    c.dataplane.vdevs[0].push_str(",bsize=4096");
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("bsize=4096 is smaller than the 9216 B"), "{e}");
    c.dataplane.vdevs[0].push('x');
    assert!(c.validate().unwrap_err().to_string().contains("bad bsize"));
}

#[test]
fn transport_settings_are_checked() {
    let c = memif();
    assert_eq!((c.server.credits, c.server.replay_cache_kb), (32, 16384));
    let mut c2 = c.clone();
    for bad in [0u16, 3, 48, 2048] {
        c2.server.credits = bad;
        let e = c2.validate().unwrap_err().to_string();
        assert!(e.contains("server.credits must be a power of two"), "{e}");
    }
    c2.server.credits = 1024; // 1 MiB / 1024 = 1024 B slots < 1440
    let e = c2.validate().unwrap_err().to_string();
    assert!(e.contains("per slot") && e.contains("1507328"), "{e}");
    c2.server.request_region_len = 1536 * 1024;
    c2.validate().unwrap();
    c2.server.replay_cache_kb = 0;
    assert!(c2.validate().is_err());
    let text = serde_json::to_string(&c)
        .unwrap()
        .replace("\"credits\":32", "\"credits\":64");
    assert_eq!(Config::parse(&text).unwrap().server.credits, 64);
    assert_eq!(slot_size(1 << 20, 32), 32768);
    assert_eq!(slot_size(1000, 3), 320);
}

#[test]
fn mac_parsing() {
    assert_eq!(parse_mac("02:00:00:00:00:0a").unwrap(), [2, 0, 0, 0, 0, 10]);
    assert!(parse_mac("02:00:00:00:00").is_err());
    assert!(parse_mac("02:00:00:00:00:00:00").is_err());
    assert!(parse_mac("zz:00:00:00:00:00").is_err());
}

/// `Config::validate` (what `ctlplane config show` runs) refuses every tenant the
/// dataplane refuses — an ACL the one parser does not take, a repeated id or name, a
/// reserve above the quota — and static QPs that are not bound where anonymous
/// clients are refused.
#[test]
fn tenants_and_static_bindings_are_validated_as_the_dataplane_does() {
    let tenant = |id: u32, name: &str, acl: &str| TenantConfig {
        name: name.into(),
        id,
        secret: "00".repeat(16),
        acl: acl.into(),
        max_connections: 0,
        requests_per_s: 0,
        max_credits: 0,
        reserved_connections: DEFAULT_RESERVED_CONNECTIONS,
    };
    let mut c = memif();
    c.tenants = vec![tenant(1, "a", "read,write"), tenant(2, "b", "all")];
    c.validate().unwrap();
    for acl in [
        "bogus",
        "read,bogus",
        "READ",
        "",
        "read, write",
        "read,read",
    ] {
        c.tenants[1].acl = acl.into();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("acl"), "{acl:?}: {e}");
    }
    c.tenants[1].acl = "all".into();
    c.tenants[1].id = 1;
    assert!(c.validate().unwrap_err().to_string().contains("unique"));
    c.tenants[1].id = 2;
    c.tenants[1].max_connections = 4;
    c.tenants[1].reserved_connections = 5;
    assert!(c
        .validate()
        .unwrap_err()
        .to_string()
        .contains("reserved_connections"));
    c.tenants[1].reserved_connections = 4;
    c.validate().unwrap();
    // Anonymous clients refused: every static QP must name its source.
    c.server.anonymous = false;
    let e = c.validate().unwrap_err().to_string();
    assert!(e.contains("bound"), "{e}");
    for cl in &mut c.clients {
        cl.mac = Some("02:00:00:00:00:02".into());
        cl.ip = Some("10.0.0.2".parse().unwrap());
    }
    c.validate().unwrap();
    c.clients[0].ip = None;
    assert!(c.validate().unwrap_err().to_string().contains("both"));
}
