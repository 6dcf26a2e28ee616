//! The figures `strata run` prints and benches use, from a model alone (no GPU needed): what the model
//! takes on the device, and the bytes a decode step reads.

use strata_cuda::backend::budget::{decode_bytes, plan_bytes, Window};
use strata_gguf::GgmlType;
use strata_model::{KvMode, Model, RopeScaling};
use strata_synth::{Options, Preset};

fn tiny() -> Model {
    // The model maps the file: it stays readable after the folder goes.
    let dir = strata_scratch::Scratch::new("device-plan");
    let path = dir.join("tiny.gguf");
    let o = Options { preset: Preset::tiny(), experts: GgmlType::Q2_0, seed: 0, router: strata_synth::Router::Uniform };
    strata_synth::write(&path, &o, &|_, _| {}).unwrap();
    Model::open(&path, RopeScaling::None).unwrap()
}

#[test]
fn plan_and_step_bytes_follow_the_model() {
    let m = tiny();
    let plan = |kv, cells| plan_bytes(&m, kv, cells, Window::of(8));
    let (weights, caches) = (plan(KvMode::F16, 1000).weights, plan(KvMode::F16, 1000).caches);
    assert_eq!(plan(KvMode::F16, 2000).caches, 2 * caches, "caches grow with the cells");
    assert_eq!(plan(KvMode::F16, 2000).weights, weights, "weights do not");
    assert!(plan(KvMode::Int8, 1000).caches < caches && caches < plan(KvMode::F32, 1000).caches);
    // Scratch holds a window's attention scores over every cell: it grows with the cells, the KV mode aside.
    assert!(plan(KvMode::F16, 2000).scratch > plan(KvMode::F16, 1000).scratch);
    assert_eq!(plan(KvMode::Int8, 1000).scratch, plan(KvMode::F16, 1000).scratch);
    // And a step's graph arena and staging area: a 64 MiB chunk each at least.
    assert!(plan(KvMode::F16, 1000).scratch >= 128 << 20);

    // A step reads the chosen experts only: less than every weight, more than none of them.
    let step0 = decode_bytes(&m, KvMode::F16, 0);
    assert!(step0 > 0 && step0 < weights, "{step0} of {weights}");
    let share = m.config.n_expert_used as f64 / m.config.n_expert as f64;
    let experts: u64 = m
        .gguf
        .tensors()
        .filter(|(_, t)| t.name.contains("_exps"))
        .map(|(_, t)| t.ty.bytes_for(t.n_elements).unwrap())
        .sum();
    assert!(experts > 0);
    assert!(step0 + experts - (experts as f64 * share) as u64 <= weights + 1);
    // Deeper steps read more cells, until the QSA layers' selection caps them (the dense layers keep growing).
    let (a, b) = (decode_bytes(&m, KvMode::F16, 100), decode_bytes(&m, KvMode::F16, 200));
    assert!(step0 < a && a < b);
    assert!(decode_bytes(&m, KvMode::Int8, 200) < b && b < decode_bytes(&m, KvMode::F32, 200));
}
