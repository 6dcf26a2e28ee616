//! The MTP cells written without the rest of the MTP layer (`backend::mtp_cells`) are the ones the whole
//! step (`backend::mtp_step`) leaves in the cache, in every KV mode: the speculation's cache is the same
//! whichever writes it.

use std::path::Path;

use strata_model::backend::{mtp_cells, mtp_step, trunk};
use strata_model::cpu::Cpu;
use strata_model::{KvMode, Model, RopeScaling};

#[test]
fn cells_alone_are_the_cells_of_the_whole_step() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/fortunes.gguf");
    let model = Model::open(path, RopeScaling::None).unwrap();
    let cpu = Cpu::new(&model);
    let tokens: Vec<u32> = (0..12).map(|i| (i * 211 + 17) % 4000).collect();
    for kv in [KvMode::F16, KvMode::F32, KvMode::Int8] {
        let mut st = model.new_state(kv).unwrap();
        let Ok((_, r)) = trunk(&cpu, &model.config, &mut st, &tokens, 0);
        let (mut whole, mut alone) = (model.mtp_cache(kv), model.mtp_cache(kv));
        // In two windows, so the second attends over the first's cells.
        for (first, n) in [(0, 7), (7, 4)] {
            let rows = r[first..first + n].to_vec();
            let next = &tokens[first + 1..first + n + 1];
            let Ok(_) = mtp_step(&cpu, &mut whole, &rows, next, first);
            let Ok(()) = mtp_cells(&cpu, &mut alone, &rows, next, first);
        }
        assert_eq!(whole.k.len(), 11);
        for (a, b) in [(&whole.k, &alone.k), (&whole.v, &alone.v)] {
            assert_eq!(a.len(), b.len());
            assert!(a.parts() == b.parts(), "{kv:?}: the cells differ");
        }
    }
}
