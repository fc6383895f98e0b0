//! Plain `Instant` timing for the benchmarks: a warm-up, then every iteration
//! timed on its own; mean, p50, p99 and max in microseconds.

use std::time::{Duration, Instant};

pub struct Stats {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

pub fn measure(warmup: usize, iterations: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..warmup {
        f();
    }
    let mut times: Vec<Duration> = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        f();
        times.push(start.elapsed());
    }
    times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let at = |q: f64| us(times[((times.len() as f64 * q) as usize).min(times.len() - 1)]);
    Stats {
        mean: times.iter().map(|d| us(*d)).sum::<f64>() / times.len() as f64,
        p50: at(0.50),
        p99: at(0.99),
        max: us(*times.last().unwrap()),
    }
}

pub fn report(name: &str, s: &Stats) {
    println!(
        "{name:<34} mean {:>8.1} µs   p50 {:>8.1} µs   p99 {:>8.1} µs   max {:>8.1} µs",
        s.mean, s.p50, s.p99, s.max
    );
}
