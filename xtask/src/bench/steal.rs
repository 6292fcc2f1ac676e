//! The host's CPU steal over one run, from `/proc/stat`. On a shared virtual machine the
//! hypervisor takes a varying share of the CPU (1–2 % one hour, 15–38 % another here), and a row
//! that runs in a steal burst drains slower: the table prints it beside each row.

/// The aggregate `cpu` counters now: (steal, total), in clock ticks; `None` off Linux.
pub fn sample() -> Option<(u64, u64)> {
    parse(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// Steal as a percentage of all CPU time between two samples, one decimal.
pub fn percent(before: (u64, u64), after: (u64, u64)) -> Option<f64> {
    let total = after.1.checked_sub(before.1).filter(|t| *t > 0)?;
    let steal = after.0.saturating_sub(before.0);
    Some((steal as f64 * 1000.0 / total as f64).round() / 10.0)
}

/// `/proc/stat`'s `cpu` line: user, nice, system, idle, iowait, irq, softirq, steal, then guest
/// time, which `user` and `nice` already count.
fn parse(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    Some((*fields.get(7)?, fields.iter().sum()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_is_its_share_of_all_ticks_between_two_samples() {
        let before = parse("cpu  100 0 50 800 10 0 5 35 7 0\ncpu0 1 2 3\n").unwrap();
        assert_eq!(before, (35, 1000));
        let after = parse("cpu  400 0 150 1100 10 0 5 335 9 0\n").unwrap();
        assert_eq!(after, (335, 2000));
        assert_eq!(percent(before, after), Some(30.0));
        assert_eq!(percent(after, after), None, "no time passed");
        assert_eq!(parse("intr 1 2 3\n"), None);
        assert_eq!(parse("cpu  1 2 3\n"), None, "a line without steal");
    }
}
