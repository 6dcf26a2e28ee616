#!/usr/bin/env python3
"""The trained model as a GGUF file: llama.cpp's vendored converter (transformers 4.57) writes the trunk and
the MTP block's attention layer as block L; this script then adds the block's own tensors in the newer
llama.cpp's `nextn` layout (docs/SPEC-NOTES.md 8) and sets `nextn_predict_layers` to 1.

    convert.py LLAMA_CPP RUN OUT.gguf    # RUN: train.py's output (hf/, nextn.pt); writes an f32 file

The gammas are written as the converter writes the trunk's: transformers' RMS norms multiply by 1 + w, and
the file holds 1 + w. The block's final mixer (`hc_head`) is written as the converter wrote the trunk's own
(`output_hc_*`); that the trunk's came out as 1 + w and unchanged matrices is checked here, not assumed.
"""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def main(llama_cpp, run, out):
    import torch
    from real_fixture import converter
    run, out = Path(run), Path(out)
    trunk = out.with_suffix(".trunk.gguf")
    converter(llama_cpp)(run / "hf", "f32", trunk)
    import gguf
    from safetensors.torch import load_file
    reader = gguf.GGUFReader(str(trunk))
    arch = reader.fields["general.architecture"].contents()
    blocks = reader.fields[f"{arch}.block_count"].contents()
    L = blocks - 1
    tensors = {t.name: t for t in reader.tensors}
    hf = load_file(str(run / "hf" / "model.safetensors"))
    own = torch.load(run / "nextn.pt")

    # How the converter wrote the trunk's final mixer, checked, then the same for the block's.
    mixer = "model.hyper_connection_mixer."
    pairs = {"norm": "hc_norm.weight", "down": "input_mix_weight_down.weight", "up": "input_mix_weight_up.weight"}
    for part, name in pairs.items():
        written = np.asarray(tensors[f"output_hc_{part}.weight"].data, dtype=np.float64)
        source = hf[mixer + name].double().numpy()
        want = source + 1 if part == "norm" else source
        if written.shape != want.shape or np.abs(written - want).max() > 1e-6:
            raise SystemExit(f"the converter wrote output_hc_{part} another way than expected")
    p = f"blk.{L}.nextn"
    extra = {
        f"{p}.enorm.weight": own["enorm"] + 1,
        f"{p}.hnorm.weight": own["hnorm"] + 1,
        f"{p}.eh_proj.weight": own["eh_proj"],
        f"{p}.hc_head_norm.weight": own["hc_head_norm"] + 1,
        f"{p}.hc_head_down.weight": own["hc_head_down"],
        f"{p}.hc_head_up.weight": own["hc_head_up"],
    }
    writer = gguf.GGUFWriter(str(out), arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    writer.add_key_value(f"{arch}.nextn_predict_layers", 1, gguf.GGUFValueType.UINT32)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    for name, value in extra.items():
        writer.add_tensor(name, value.float().numpy().astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    trunk.unlink()
    print(f"wrote {out}: {blocks} blocks, the last the MTP block")


if __name__ == "__main__":
    main(*sys.argv[1:4])
