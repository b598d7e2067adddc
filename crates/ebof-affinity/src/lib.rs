//! # ebof-affinity — CPU affinity helpers
//!
//! Pin the calling thread to a core, list the cores this process may run on, and read a core
//! list such as `0-3,6`. Shared by the target's reactors (`ebof-runtime`, re-exported there as
//! `ebof_runtime::affinity`) and the load generator (`ebof-perf`, `ebof perf --cores`), so
//! that the load generator does not link the target to get them. It depends on `libc` only.

/// Pin the calling thread to `core`. Returns an error string if the kernel refuses (e.g. the
/// core is not in the process's allowed set).
pub fn pin_current_thread(core: usize) -> Result<(), String> {
    if core >= libc::CPU_SETSIZE as usize {
        return Err(format!("core {core} out of range"));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set; CPU_SET is called with an
    // index checked against CPU_SETSIZE above; sched_setaffinity reads the set we pass by pointer
    // for the size we give.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "cannot pin to core {core}: {}",
            std::io::Error::last_os_error()
        ))
    }
}

/// The cores this process may run on, ascending.
pub fn allowed_cores() -> Vec<usize> {
    // SAFETY: as above; sched_getaffinity writes into the set we own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Parse a core list like "0,1", "0-3", "0-1,4".
pub fn parse_core_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let a: usize = a
                .trim()
                .parse()
                .map_err(|_| format!("bad core range '{part}'"))?;
            let b: usize = b
                .trim()
                .parse()
                .map_err(|_| format!("bad core range '{part}'"))?;
            if a > b || b >= 4096 {
                return Err(format!("bad core range '{part}'"));
            }
            out.extend(a..=b);
        } else {
            let c: usize = part.parse().map_err(|_| format!("bad core '{part}'"))?;
            if c >= 4096 {
                return Err(format!("bad core '{part}'"));
            }
            out.push(c);
        }
    }
    if out.is_empty() {
        return Err("empty core list".into());
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_lists() {
        assert_eq!(parse_core_list("0-1,4").unwrap(), vec![0, 1, 4]);
        assert_eq!(parse_core_list(" 3, 1,1 ,2-3").unwrap(), vec![1, 2, 3]);
        assert!(parse_core_list("").is_err());
        assert!(parse_core_list("3-1").is_err());
        assert!(parse_core_list("4096").is_err());
        assert!(parse_core_list("a").is_err());
    }

    #[test]
    fn allowed_cores_are_listed_and_out_of_range_is_refused() {
        let cores = allowed_cores();
        assert!(!cores.is_empty());
        assert!(pin_current_thread(libc::CPU_SETSIZE as usize).is_err());
    }
}
