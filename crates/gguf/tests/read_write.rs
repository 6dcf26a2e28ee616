//! The reader and writer: round trips, shard sets, and a typed error for each kind of broken file.

mod common;

use common::*;
use strata_gguf::{ErrorKind, GgmlType, GgufBuilder, GgufFile, GgufSet, Value};

fn parse(bytes: Vec<u8>) -> Result<GgufFile, strata_gguf::Error> {
    GgufFile::from_bytes("test.gguf", bytes)
}

fn kind(bytes: Vec<u8>) -> ErrorKind {
    match parse(bytes) {
        Ok(_) => panic!("a broken file was accepted"),
        Err(e) => {
            assert!(e.to_string().starts_with("test.gguf: "), "{e}");
            e.kind
        }
    }
}

#[test]
fn round_trip_keeps_metadata_and_tensors() {
    let f = parse(sample_file(1)).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.header().alignment, 64);
    assert_eq!(f.header().data_offset % 64, 0);
    assert_eq!(f.metadata(), &sample_metadata()[..]);
    let tensors = sample_tensors(1);
    assert_eq!(f.tensors().len(), tensors.len());
    for (name, shape, ty, data) in &tensors {
        let t = f.require(name).unwrap();
        assert_eq!((&t.info.shape, t.info.ty, t.data), (shape, *ty, &data[..]));
        assert_eq!(t.info.offset % 64, 0);
        assert_eq!(t.to_f32().unwrap().len() as u64, t.info.n_elements);
    }
    assert!(matches!(f.require("nope").err().unwrap().kind, ErrorKind::TensorNotFound(_)));
}

#[test]
fn open_maps_a_file_from_disk() {
    let dir = tempdir();
    let path = dir.join("m.gguf");
    std::fs::write(&path, sample_file(2)).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.get("general.architecture"), Some(&Value::String("qwen4exp".into())));
    let e = GgufFile::open(dir.join("missing.gguf")).err().unwrap();
    assert!(e.to_string().contains("missing.gguf"), "{e}");
    std::fs::write(dir.join("empty.gguf"), b"").unwrap();
    assert!(matches!(GgufFile::open(dir.join("empty.gguf")).err().unwrap().kind, ErrorKind::Truncated { .. }));
}

#[test]
fn shards_open_as_one_set() {
    let dir = tempdir();
    let names = ["a.weight", "b.weight", "c.weight"];
    for (i, n) in names.iter().enumerate() {
        let mut b = GgufBuilder::new();
        b.add("split.no", Value::U16(i as u16)).add("split.count", Value::U16(3));
        b.add(&format!("only.in.{i}"), Value::U32(i as u32));
        b.add_tensor(n, &[32], GgmlType::F32).unwrap();
        let mut w = b.create(dir.join(strata_gguf::shard_name("model", i + 1, 3))).unwrap();
        w.write(&[i as u8; 128]).unwrap();
        w.finish().unwrap();
    }
    // Any shard's name opens the whole set.
    let set = GgufSet::open(dir.join("model-00002-of-00003.gguf")).unwrap();
    assert_eq!(set.files().len(), 3);
    for (i, n) in names.iter().enumerate() {
        assert_eq!(set.require(n).unwrap().data, &[i as u8; 128][..]);
        assert_eq!(set.get(&format!("only.in.{i}")).and_then(Value::as_u64), Some(i as u64));
    }
    assert_eq!(set.tensors().count(), 3);
    // A missing shard is an error naming it.
    std::fs::remove_file(dir.join("model-00003-of-00003.gguf")).unwrap();
    let e = GgufSet::open(dir.join("model-00001-of-00003.gguf")).err().unwrap();
    assert!(e.to_string().contains("model-00003-of-00003.gguf"), "{e}");
}

#[test]
fn every_prefix_of_a_file_is_an_error_not_a_panic() {
    let full = sample_file(3);
    let header_end = parse(full.clone()).unwrap().header().data_offset as usize;
    for len in 0..full.len() {
        let e = parse(full[..len].to_vec());
        assert!(e.is_err(), "prefix of {len} bytes accepted");
        if len < header_end - 64 {
            assert!(matches!(e.err().unwrap().kind, ErrorKind::Truncated { .. } | ErrorKind::CountTooLarge { .. }));
        }
    }
}

#[test]
fn header_errors() {
    let mut bad_magic = raw_file(3, 0, &[], &[], 0);
    bad_magic[0] = b'X';
    assert!(matches!(kind(bad_magic), ErrorKind::BadMagic(_)));
    assert!(matches!(kind(raw_file(1, 0, &[], &[], 0)), ErrorKind::UnsupportedVersion(1)));
    assert!(matches!(kind(raw_file(4, 0, &[], &[], 0)), ErrorKind::UnsupportedVersion(4)));
    assert!(matches!(kind(raw_file(3u32.swap_bytes(), 0, &[], &[], 0)), ErrorKind::BigEndian));
    assert!(parse(raw_file(2, 0, &[], &[], 0)).is_ok(), "version 2 is read");
    // A count of key-value pairs the file could never hold.
    assert!(matches!(kind(raw_file(3, u64::MAX, &[], &[], 0)), ErrorKind::CountTooLarge { .. }));
}

#[test]
fn metadata_errors() {
    // A string length past the end.
    let mut kv = Vec::new();
    put_str(&mut kv, "k");
    kv.extend_from_slice(&8u32.to_le_bytes());
    kv.extend_from_slice(&1_000_000u64.to_le_bytes());
    assert!(matches!(kind(raw_file(3, 1, &kv, &[], 0)), ErrorKind::Truncated { .. }));
    // An array count larger than the file.
    let mut kv = Vec::new();
    put_str(&mut kv, "k");
    kv.extend_from_slice(&9u32.to_le_bytes());
    kv.extend_from_slice(&4u32.to_le_bytes());
    kv.extend_from_slice(&(u64::MAX / 2).to_le_bytes());
    assert!(matches!(kind(raw_file(3, 1, &kv, &[], 0)), ErrorKind::CountTooLarge { .. }));
    // Unknown value type.
    let mut kv = Vec::new();
    put_str(&mut kv, "k");
    kv.extend_from_slice(&13u32.to_le_bytes());
    assert!(matches!(kind(raw_file(3, 1, &kv, &[], 0)), ErrorKind::UnknownValueType { id: 13, .. }));
    // Invalid UTF-8 in a key.
    let mut kv = Vec::new();
    kv.extend_from_slice(&2u64.to_le_bytes());
    kv.extend_from_slice(&[0xff, 0xfe]);
    kv.extend_from_slice(&4u32.to_le_bytes());
    kv.extend_from_slice(&0u32.to_le_bytes());
    assert!(matches!(kind(raw_file(3, 1, &kv, &[], 0)), ErrorKind::InvalidUtf8 { .. }));
    // Arrays of arrays nested past the limit.
    let mut kv = Vec::new();
    put_str(&mut kv, "deep");
    kv.extend_from_slice(&9u32.to_le_bytes());
    for _ in 0..20 {
        kv.extend_from_slice(&9u32.to_le_bytes());
        kv.extend_from_slice(&1u64.to_le_bytes());
    }
    kv.extend_from_slice(&[0; 64]);
    assert!(matches!(kind(raw_file(3, 1, &kv, &[], 0)), ErrorKind::NestingTooDeep { .. }));
    // A duplicate key; an alignment that is not a power of two.
    let kv = [kv_u32("a", 1), kv_u32("a", 2)].concat();
    assert!(matches!(kind(raw_file(3, 2, &kv, &[], 0)), ErrorKind::DuplicateKey(_)));
    assert!(matches!(kind(raw_file(3, 1, &kv_u32("general.alignment", 48), &[], 0)), ErrorKind::BadMetadata { .. }));
    assert!(matches!(kind(raw_file(3, 1, &kv_u32("general.alignment", 0), &[], 0)), ErrorKind::BadMetadata { .. }));
}

#[test]
fn tensor_errors() {
    let t = |ts: &[(&str, &[u64], u32, u64)], data| kind(raw_file(3, 0, &[], ts, data));
    assert!(matches!(t(&[("a", &[32], 0, 0)], 64), ErrorKind::DataPastEnd { .. }));
    assert!(parse(raw_file(3, 0, &[], &[("a", &[32], 0, 0)], 128)).is_ok());
    assert!(matches!(t(&[("a", &[32], 0, 16)], 256), ErrorKind::Misaligned { .. }));
    assert!(matches!(t(&[("a", &[32], 0, 0), ("b", &[32], 0, 64)], 256), ErrorKind::Overlap { .. }));
    assert!(matches!(t(&[("a", &[32], 19, 0)], 256), ErrorKind::UnknownTensorType { id: 19, .. }));
    assert!(matches!(t(&[("a", &[32], 9999, 0)], 256), ErrorKind::UnknownTensorType { .. }));
    assert!(matches!(t(&[("a", &[1 << 32, 1 << 32], 0, 0)], 256), ErrorKind::ShapeOverflow { .. }));
    assert!(matches!(
        t(&[("a", &[u64::MAX], 8, 0)], 256),
        ErrorKind::ShapeOverflow { .. } | ErrorKind::NotWholeBlocks { .. }
    ));
    assert!(matches!(t(&[("a", &[40], 8, 0)], 256), ErrorKind::NotWholeBlocks { ne0: 40, .. }));
    assert!(matches!(t(&[("a", &[1, 1, 1, 1, 1], 0, 0)], 256), ErrorKind::TooManyDims { n_dims: 5, .. }));
    assert!(matches!(t(&[("a", &[32], 0, 0), ("a", &[32], 0, 128)], 512), ErrorKind::DuplicateTensor(_)));
    assert!(matches!(
        t(&[("a", &[32], 0, u64::MAX - 8)], 256),
        ErrorKind::Misaligned { .. } | ErrorKind::DataPastEnd { .. }
    ));
    assert!(matches!(t(&[("a", &[32], 0, 1 << 63)], 256), ErrorKind::DataPastEnd { .. }));
    // Error messages name the tensor.
    let e = parse(raw_file(3, 0, &[], &[("blk.0.attn_q.weight", &[40], 8, 0)], 256)).err().unwrap();
    assert!(e.to_string().contains("blk.0.attn_q.weight"), "{e}");
}

#[test]
fn writer_refuses_wrong_data() {
    let mut b = GgufBuilder::new();
    b.add_tensor("a", &[32], GgmlType::Q8_0).unwrap();
    b.add_tensor("b", &[32], GgmlType::F16).unwrap();
    assert!(b.add_tensor("a", &[32], GgmlType::F32).is_err(), "duplicate name");
    assert!(b.add_tensor("c", &[33], GgmlType::Q8_0).is_err(), "not whole blocks");
    let mut w = b.begin(Vec::new(), "w.gguf").unwrap();
    assert!(w.write_tensor("b", &[0; 64]).is_err(), "out of order");
    assert!(w.write_tensor("a", &[0; 33]).is_err(), "wrong size");
    w.write(&[0; 20]).unwrap();
    w.write(&[0; 14]).unwrap();
    let e = w.finish().err().unwrap();
    assert!(e.to_string().contains("\"b\""), "{e}");
}

fn tempdir() -> strata_scratch::Scratch {
    strata_scratch::Scratch::new("gguf-test")
}

/// A sink that keeps the first bytes it is given and counts the rest.
struct CountingSink {
    head: Vec<u8>,
    total: u64,
}

impl std::io::Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let keep = (4096 - self.head.len().min(4096)).min(buf.len());
        self.head.extend_from_slice(&buf[..keep]);
        self.total += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn writer_streams_files_past_4_gib() {
    // 5 GiB of tensors go through a 1 MiB buffer: nothing but the header is held, and offsets past
    // 2³² are written as u64.
    let mut b = GgufBuilder::new();
    b.add_tensor("big.weight", &[1 << 20, 1 << 10], GgmlType::F32).unwrap(); // 4 GiB
    b.add_tensor("after.weight", &[256, 4096], GgmlType::Q4_K).unwrap(); // 576 KiB, offset > 4 GiB
    b.add_tensor("tail.weight", &[1 << 28], GgmlType::F32).unwrap(); // 1 GiB
    let mut w = b.begin(CountingSink { head: Vec::new(), total: 0 }, "big.gguf").unwrap();
    let chunk = vec![0u8; 1 << 20];
    while let Some(t) = w.next_tensor() {
        let n = t.n_bytes.min(chunk.len() as u64) as usize;
        w.write(&chunk[..n]).unwrap();
    }
    let sink = w.finish().unwrap();
    // The header read from the sink's first bytes, checked against the full length, places every tensor
    // exactly, the second past 4 GiB.
    let h = strata_gguf::parse_head(&sink.head, sink.total).unwrap();
    assert_eq!(h.tensors[1].offset, 4 << 30);
    let last = &h.tensors[2];
    assert_eq!(h.data_offset + last.offset + last.n_bytes, sink.total);
    assert!(strata_gguf::parse_head(&sink.head, sink.total - 1).is_err());
}
