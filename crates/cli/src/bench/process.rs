//! This process's CPU time and memory, for benchmarks that report per-core rates and peak
//! resident memory (Linux `/proc`; `None` elsewhere).

/// CPU seconds this process has used (user + system), from `/proc/self/stat`.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after = stat.rsplit(')').next()?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Starts a new measurement of this process's peak resident memory (writing 5 to
/// `/proc/self/clear_refs` resets `VmHWM`).
pub fn reset_peak_memory() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A memory figure of this process from `/proc/self/status` (`VmHWM:` peak, `VmRSS:`
/// resident), in MiB.
pub fn memory_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
