//! Every kernel file, with every variant in it, compiles for every supported architecture with the
//! run-time flags (NVRTC, no GPU needed), and no kernel spills registers (ptxas -v on the PTX). CI installs
//! NVRTC and ptxas from the package registry's CUDA wheels (`.ci/run`); elsewhere, without them, this says
//! SKIPPED. Device time then goes to parity and speed, not to typos.

use std::path::PathBuf;
use std::process::Command;

use strata_cuda::ops::sources::{text_of, BODIES as KERNEL_FILES};
use strata_cuda::runtime::compile::{compile_ptx, SUPPORTED_ARCHS};
use strata_cuda::CudaError;

fn ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// ptxas: `$STRATA_PTXAS`, else the one on PATH.
fn ptxas() -> Option<String> {
    let p = std::env::var("STRATA_PTXAS").unwrap_or_else(|_| "ptxas".into());
    Command::new(&p).arg("--version").output().ok().filter(|o| o.status.success()).map(|_| p)
}

/// Per kernel: (name, spill store bytes, spill load bytes, registers), from `ptxas -v`'s report.
fn spills(report: &str) -> Vec<(String, u64, u64, u64)> {
    let mut out = Vec::new();
    let mut name = String::new();
    let number_before = |line: &str, what: &str| -> u64 {
        line.split(',')
            .find(|part| part.contains(what))
            .and_then(|part| part.split_whitespace().find_map(|w| w.parse().ok()))
            .unwrap_or(0)
    };
    for line in report.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            name = rest.trim().to_string();
        } else if line.contains("spill stores") {
            out.push((name.clone(), number_before(line, "spill stores"), number_before(line, "spill loads"), 0));
        } else if line.contains("Used") && line.contains("registers") {
            if let Some(last) = out.last_mut() {
                let regs =
                    line.split("Used").nth(1).and_then(|r| r.split_whitespace().next()).and_then(|n| n.parse().ok());
                last.3 = regs.unwrap_or(0);
            }
        }
    }
    out
}

#[test]
fn every_kernel_compiles_for_every_architecture_without_spills() {
    match compile_ptx("hc.cu", &text_of("hc.cu", KERNEL_FILES[0].1), "", (9, 0)) {
        Err(CudaError::NoDevice(m)) => {
            assert!(!ci(), "CI must have NVRTC (.ci/run installs nvidia-cuda-nvrtc): {m}");
            eprintln!("SKIPPED: {m} (pip install nvidia-cuda-nvrtc==13.0.* and put its lib folder on LD_LIBRARY_PATH)");
            return;
        }
        r => {
            r.expect("hc.cu compiles for sm_90");
        }
    }
    let ptxas = ptxas();
    if ptxas.is_none() {
        assert!(!ci(), "CI must have ptxas (.ci/run installs nvidia-cuda-nvcc)");
        eprintln!("SKIPPED the spill check: no ptxas (pip install nvidia-cuda-nvcc==13.0.*, or set STRATA_PTXAS)");
    }
    // The PTX stays where STRATA_PTX_DIR names (bench/sass_same.sh, bench/sass_loops.sh read it there);
    // otherwise it goes with the test's scratch folder.
    let scratch = strata_scratch::Scratch::new("ptx");
    let dir = std::env::var_os("STRATA_PTX_DIR").map_or_else(|| scratch.path().to_path_buf(), PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();
    let mut checked = 0;
    // Every file for every architecture, then the compile-time variants (STRATA_DEFINES) that are not the
    // default for sm_90: their macro before the file.
    let files = KERNEL_FILES.iter().flat_map(|&(file, source)| {
        SUPPORTED_ARCHS.into_iter().map(move |arch| (file, String::new(), source.to_string(), arch))
    });
    let variants = COMPILE_VARIANTS
        .iter()
        .map(|&(file, define)| (file, define.to_string(), format!("#define {define}\n{}", source_of(file)), (9, 0)));
    // STRATA_COMPILE_ONLY=hc.cu checks one file (while working on it); CI checks them all.
    let only = std::env::var("STRATA_COMPILE_ONLY").ok();
    for (file, define, source, arch) in files.chain(variants) {
        if only.as_deref().is_some_and(|o| o != file) {
            continue;
        }
        let what = format!("{file} {define}");
        let ptx = compile_ptx(file, &text_of(file, &source), "", arch)
            .unwrap_or_else(|e| panic!("{what} for sm_{}{}: {e}", arch.0, arch.1));
        assert!(ptx.contains(".entry"), "{what}: no kernel in the PTX");
        let Some(ptxas) = &ptxas else { continue };
        let tag: String = define.split_whitespace().map(|w| format!("-{w}")).collect();
        let path = dir.join(format!("{}{tag}-sm{}{}.ptx", file.trim_end_matches(".cu"), arch.0, arch.1));
        std::fs::write(&path, &ptx).unwrap();
        let out = Command::new(ptxas)
            .args([&format!("-arch=sm_{}{}", arch.0, arch.1), "-v", "-o", "/dev/null"])
            .arg(&path)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "ptxas {what} sm_{}{}:\n{report}", arch.0, arch.1);
        let kernels = spills(&report);
        assert!(!kernels.is_empty(), "no kernel report from ptxas:\n{report}");
        for (name, stores, loads, regs) in &kernels {
            assert!(
                *stores == 0 && *loads == 0,
                "{name} (sm_{}{}) spills: {stores} B stored, {loads} B loaded",
                arch.0,
                arch.1
            );
            if arch == (9, 0) {
                eprintln!("sm_90 {name}: {regs} registers, no spills");
            }
            checked += 1;
        }
    }
    eprintln!("{checked} kernel builds checked");
}

/// The kernels' compile-time variants other than their defaults (each file's `#ifndef` macros, which
/// `STRATA_DEFINES` sets at run time): (file, `NAME VALUE`).
const COMPILE_VARIANTS: [(&str, &str); 10] = [
    ("matvec.cu", "MATVEC_PREFETCH 0"),
    ("matvec.cu", "MATVEC_PREFETCH 1"),
    ("hc.cu", "HC_EARLY 0"),
    ("hc.cu", "HC_EARLY 2"),
    ("hc.cu", "HC_LONG_PIPE 1"),
    ("qdot.cu", "QDOT_ROW_AHEAD 0"),
    ("qdot.cu", "QDOT_WINDOW_SMEM 1"),
    ("qdot.cu", "ROUTER_ONE_PASS 0"),
    ("gdn.cu", "GDN_FETCH_NEXT 0"),
    ("misses.cu", "MISS_STREAM_WIDE 1"),
];

fn source_of(file: &str) -> &'static str {
    KERNEL_FILES.iter().find(|(f, _)| *f == file).map(|(_, s)| *s).expect("a kernel file")
}

#[test]
fn the_spill_report_is_read() {
    let report = "ptxas info    : Compiling entry function 'k' for 'sm_90'\n\
                  ptxas info    : Function properties for k\n    \
                  8 bytes stack frame, 12 bytes spill stores, 4 bytes spill loads\n\
                  ptxas info    : Used 255 registers, used 1 barriers\n\
                  ptxas info    : Function properties for j\n    \
                  0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n\
                  ptxas info    : Used 40 registers\n";
    assert_eq!(spills(report), vec![("k".to_string(), 12, 4, 255), ("j".to_string(), 0, 0, 40)]);
}

/// The run-time path: machine code straight from NVRTC (no PTX for the driver to compile at each load),
/// a part of a split file holding its own type's kernels and not another's.
#[test]
fn a_part_compiles_to_machine_code() {
    use strata_cuda::ops::sources::MATVEC_FILE;
    use strata_cuda::runtime::compile::compile_cubin;
    let part = MATVEC_FILE.part_of("matvec_q8_0_staged");
    let bin = match compile_cubin("matvec.cu", &MATVEC_FILE.part_text(part), "", (9, 0)) {
        Err(CudaError::NoDevice(m)) => {
            assert!(!ci(), "CI must have NVRTC: {m}");
            eprintln!("SKIPPED: {m}");
            return;
        }
        r => r.expect("matvec.cu's Q8_0 part compiles to a cubin for sm_90"),
    };
    assert_eq!(&bin[..4], b"\x7fELF", "a cubin is an ELF file");
    let has = |name: &str| bin.windows(name.len()).any(|w| w == name.as_bytes());
    assert!(has("matvec_q8_0_staged") && !has("matvec_q4_k_staged"), "the part holds its own type only");
}
