mod new;
mod old;
use std::time::{Duration, Instant};
fn spin(us: u64) { let t = Instant::now(); while t.elapsed() < Duration::from_micros(us) { std::hint::spin_loop(); } }
fn bench(name: &str, f: &dyn old::Fork, jobs: usize) {
    let mut v: Vec<f64> = (0..jobs).map(|_| { let t = Instant::now(); f.each(12, &|_| spin(15)); t.elapsed().as_secs_f64() * 1e6 }).collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    println!("{name}: mean {mean:.0} µs, median {:.0}, p90 {:.0}, p99 {:.0}, max {:.0}", v[v.len()/2], v[v.len()*9/10], v[v.len()*99/100], v[v.len()-1]);
}
struct N(new::Team);
impl old::Fork for N { fn each(&self, t: usize, f: &(dyn Fn(usize) + Sync)) { new::Fork::each(&self.0, t, f) } fn threads(&self) -> usize { 2 } }
fn main() {
    let threads: usize = std::env::args().nth(1).map_or(2, |s| s.parse().unwrap());
    let busy: usize = std::env::args().nth(2).map_or(1, |s| s.parse().unwrap());
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hs: Vec<_> = (0..busy).map(|_| { let s = stop.clone(); std::thread::spawn(move || while !s.load(std::sync::atomic::Ordering::Relaxed) { std::hint::spin_loop(); }) }).collect();
    for round in 0..2 {
        let o = old::Team::new(threads, "old"); bench(&format!("old r{round}"), &o, 1500); drop(o);
        let n = N(new::Team::new(threads, "new")); bench(&format!("new r{round}"), &n, 1500); drop(n);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hs { h.join().unwrap(); }
}
