//! CPU affinity helpers.

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
