//! The one road from configuration to the live target.
//!
//! Each feature whose part of the configuration has live state in the target implements
//! [`Apply`]: given the running configuration before a change (`old`) and after it (`new`,
//! already validated), it makes the live target match `new` for its part. The same appliers run
//! in the same order
//!
//! - at start-up, as the change from an empty configuration to the file
//!   ([`crate::build::build_target`] after the namespaces are opened), and
//! - after every change through the management API (`crate::running::Running::change`: the
//!   request edits a copy of the running configuration and validates it, the appliers run, and
//!   only then is the copy committed),
//!
//! so "the file at start" and "the same change through the API" cannot drift apart. Appliers
//! compare `new` with what is live (not only with `old`) and touch only what differs, so running
//! one twice, or after a request that already changed the target itself, changes nothing.
//!
//! | feature | applier | live state |
//! |---|---|---|
//! | ANA | [`crate::ana::Ana`] | the target's ANA table (listeners of `new` only) |
//! | referrals | [`crate::referrals::Referrals`] | the discovery log's referral entries |
//! | QoS | [`crate::qos::Qos`] | each namespace's limits |
//! | masking | [`crate::masking::Masking`] | each subsystem's per-namespace host lists |
//! | DH-HMAC-CHAP keys | [`crate::hostkeys::HostKeys`] | the target's authentication policy |
//! | CDC | [`crate::cdc::CdcMembers`] | the Central Discovery Controller's members and trust list |
//! | mDNS | `crate::mdns::sync`, after the commit (goodbyes are waited for: not under the configuration's lock) | the records the responder publishes |
//!
//! Three parts are not diffs of the configuration, and keep one shared function that both roads
//! call instead: **namespaces** are opened whole (backend, ANA group, QoS, host list and
//! reservations) by [`crate::build::open_namespace`], at start and when the API adds one, so a
//! namespace is never live without its limits or its mask; **listeners** are bound by the
//! transport (the port a listener gets feeds back into the configuration,
//! [`crate::build::settle_bound_ports`]); **pools** are directories made before namespaces are
//! opened in them ([`crate::pools::ensure_directories`]). Subsystems and their host lists are
//! changed by [`crate::ops`], the target being the authority on who may connect.

use crate::api::ApiError;
use ebof_config::Config;
use nvmf_target::Target;

/// Applies one feature's part of a configuration change to the live target (see the module
/// docs).
pub trait Apply: Send + Sync + std::fmt::Debug {
    /// Make `live` match `new` for this feature (`old`: the configuration before the change; an
    /// empty one at start-up). `new` is valid; an error leaves the change uncommitted.
    fn apply(&self, old: &Config, new: &Config, live: &Target) -> Result<(), ApiError>;
}

/// Run `appliers` in order; the first error stops them.
pub fn all<'a>(
    appliers: impl IntoIterator<Item = &'a dyn Apply>,
    old: &Config,
    new: &Config,
    live: &Target,
) -> Result<(), ApiError> {
    appliers
        .into_iter()
        .try_for_each(|a| a.apply(old, new, live))
}

#[cfg(test)]
mod tests {
    use crate::running::Running;
    use ebof_config::Config;
    use nvmf_target::Target;
    use std::sync::Arc;

    const SUB: &str = "nqn.2026-11.io.ebof:road";
    const HOST: &str = "nqn.2014-08.org.example:h";

    fn file(extra: bool) -> Config {
        let mut t = String::from(
            "[[listeners]]\naddress = \"127.0.0.1\"\nport = 4420\n\
             [[listeners]]\naddress = \"127.0.0.1\"\nport = 4421\n",
        );
        if extra {
            t += "[discovery]\nreferrals = [\"10.0.0.9:8009\"]\n\
                  [[ana]]\nlistener = \"127.0.0.1:4421\"\ngroup = 2\nstate = \"inaccessible\"\n\
                  [[hosts]]\nnqn = \"nqn.2014-08.org.example:h\"\n";
            let key = nvme_auth::DhchapSecret::from_key(nvme_auth::KeyTransform::Sha256, &[7; 32])
                .unwrap()
                .encode()
                .to_string();
            t += &format!("dhchap_key = \"{key}\"\n");
        }
        t += &format!("[[subsystems]]\nnqn = \"{SUB}\"\n");
        t += "[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\n";
        t += "[[subsystems.namespaces]]\nbackend = \"ram\"\nsize = \"1M\"\nana_group = 2\n";
        if extra {
            t += "qos = { iops = 500, write_mbps = 7 }\nhosts = [\"nqn.2014-08.org.example:h\"]\n";
        }
        Config::from_toml_str(&t).unwrap()
    }

    /// What the appliers set, as the target shows it.
    fn live(t: &Target) -> String {
        let s = t.subsystem(SUB).unwrap();
        let ns: Vec<_> = s
            .namespaces
            .iter()
            .map(|n| {
                (
                    n.nsid,
                    n.qos.limits(),
                    s.ns_host_list(n.nsid).map(<[_]>::to_vec),
                )
            })
            .collect();
        let auth = t
            .auth_policy()
            .is_some_and(|p| p.session(HOST, SUB, 0).is_some());
        format!(
            "{:?} {:?} {ns:?} {auth}",
            crate::ana::views(t),
            crate::referrals::list(t)
        )
    }

    /// Fails every change that sets referrals (after the referrals applier ran).
    #[derive(Debug)]
    struct RefuseReferrals;
    impl crate::apply::Apply for RefuseReferrals {
        fn apply(&self, _: &Config, new: &Config, _: &Target) -> Result<(), crate::api::ApiError> {
            if new.discovery_settings.referrals.is_empty() {
                Ok(())
            } else {
                Err(crate::api::ApiError::new("test-refusal", "", "refused"))
            }
        }
    }

    /// A change an applier refuses changes nothing, not even what the appliers before it did.
    #[test]
    fn a_refused_change_leaves_the_target_as_it_was() {
        let bare = file(false);
        let t = Arc::new(crate::build::build_target(&bare).unwrap());
        let mut appliers = crate::build::appliers();
        appliers.push(Arc::new(RefuseReferrals));
        let r = Running::new(t.clone(), bare.clone(), None, appliers);
        let before = live(&t);
        let err = r
            .change(|cfg| {
                *cfg = file(true);
                crate::lookup::check(cfg)
            })
            .unwrap_err();
        assert_eq!(err.code, "test-refusal");
        assert_eq!(
            live(&t),
            before,
            "the appliers before the refusal were undone"
        );
        assert_eq!(
            r.get().discovery_settings.referrals,
            bare.discovery_settings.referrals
        );
    }

    /// The one road: a box started from a file and a box given the same configuration as a
    /// change are the same box.
    #[test]
    fn the_file_at_start_and_the_same_change_give_the_same_target() {
        let full = file(true);
        let started = crate::build::build_target(&full).unwrap();
        let bare = file(false);
        let changed = Arc::new(crate::build::build_target(&bare).unwrap());
        let r = Running::new(changed.clone(), bare, None, crate::build::appliers());
        assert_ne!(
            live(&started),
            live(&changed),
            "the bare file sets none of it"
        );
        r.change(|cfg| {
            *cfg = full.clone();
            crate::lookup::check(cfg)
        })
        .unwrap();
        assert_eq!(live(&started), live(&changed));
        assert!(live(&started).ends_with("true"), "{}", live(&started));
        // And back: the change to the bare file undoes all of it.
        r.change(|cfg| {
            *cfg = file(false);
            Ok(())
        })
        .unwrap();
        assert_eq!(
            live(&changed),
            live(&crate::build::build_target(&file(false)).unwrap())
        );
    }
}
