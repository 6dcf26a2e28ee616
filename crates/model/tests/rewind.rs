//! A state rewound to a point it passed is, byte for byte, the state of a run that stopped there, and
//! goes on the same way (what a speculative window's rejected drafts rely on: docs/SPECULATION.md).

use std::path::Path;

use strata_model::state::LayerState;
use strata_model::{KvMode, Model, RopeScaling, State};

fn model() -> Model {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/real/qwen4exp-real-q8_0.gguf");
    Model::open(path, RopeScaling::None).unwrap()
}

fn bytes(m: &Model, s: &State) -> Vec<u8> {
    let mut out = Vec::new();
    s.save(&m.config, &mut out).unwrap();
    out
}

fn complete_blocks(s: &State) -> usize {
    s.layers.iter().map(|l| if let LayerState::Attn(q) = l { q.blocks.len() } else { 0 }).sum()
}

#[test]
fn a_rewound_state_is_the_state_that_stopped_there() {
    let m = model();
    let tokens: Vec<u32> = (0..40).map(|i| (i * 61 + 17) % 3000).collect();
    for kv in [KvMode::F16, KvMode::Int8, KvMode::F32] {
        let mut run = m.new_state(kv).unwrap();
        let mut points = vec![run.point()];
        for &t in &tokens {
            m.forward_hidden(&mut run, t);
            points.push(run.point());
        }
        let mut blocks_crossed = false;
        for at in [0, 1, 7, 23, 39] {
            let mut fresh = m.new_state(kv).unwrap();
            for &t in &tokens[..at] {
                m.forward_hidden(&mut fresh, t);
            }
            let mut back = run.clone();
            back.rewind(&points[at]).unwrap();
            assert_eq!(bytes(&m, &back), bytes(&m, &fresh), "{kv:?}: rewound to {at}");
            blocks_crossed |= complete_blocks(&run) > complete_blocks(&fresh);
            // And it goes on as the fresh one does.
            let (a, _) = m.forward_hidden(&mut back, 5);
            let (b, _) = m.forward_hidden(&mut fresh, 5);
            assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "{kv:?}: after {at}");
        }
        assert!(blocks_crossed, "no index block completed after a point: the test misses the block keys");
    }
}

#[test]
fn a_point_ahead_or_of_another_layout_is_refused() {
    let m = model();
    let mut s = m.new_state(KvMode::F16).unwrap();
    m.forward_hidden(&mut s, 3);
    let ahead = s.point();
    let mut back = m.new_state(KvMode::F16).unwrap();
    let before = bytes(&m, &back);
    assert!(back.rewind(&ahead).unwrap_err().contains("no rewind"));
    assert_eq!(bytes(&m, &back), before, "a refused rewind changes nothing");
}
