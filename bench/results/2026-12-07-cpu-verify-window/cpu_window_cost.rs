// The scratch harness behind this folder's window costs (not part of the build): copy it to
// crates/engine/examples/cpu_window_cost.rs and run `cargo run --release -p strata-engine --example
// cpu_window_cost`. The built-in model, 512 tokens deep, CPU: the mean time of `forward_greedy` over a window
// of T tokens from a restored state, less the restore's own time, two rounds.
use std::path::Path;
use std::time::Instant;
use strata_model::decoder::{CpuDecoder, Decoder};
use strata_model::{KvMode, Model, RopeScaling};

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fortunes.gguf");
    let m = Model::open(path, RopeScaling::None).unwrap();
    let mut dec = CpuDecoder::new(&m, m.new_state(KvMode::F16).unwrap());
    let prompt: Vec<u32> = (0..512).map(|i| (i * 131 + 40) % 4000).collect();
    dec.advance(&prompt).unwrap();
    let saved = dec.snapshot().unwrap();
    let reps = 300;
    let t0 = Instant::now();
    for _ in 0..reps {
        dec.restore(&saved).unwrap();
    }
    let restore = t0.elapsed().as_secs_f64() / reps as f64;
    for round in 0..2 {
        for t in [1usize, 2, 3, 4, 8] {
            let w: Vec<u32> = (0..t as u32).map(|i| 100 + i).collect();
            let t0 = Instant::now();
            for _ in 0..reps {
                dec.restore(&saved).unwrap();
                dec.forward_greedy(&w).unwrap();
            }
            let el = t0.elapsed().as_secs_f64() / reps as f64 - restore;
            println!("round {round} T={t}: {:.3} ms", el * 1e3);
        }
    }
    println!("restore {:.3} ms", restore * 1e3);
}
