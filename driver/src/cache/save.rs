//! Saving a prepared model: the model cache (sealed) and the data cache (the constant
//! block as the device holds it), both truncated and rewritten from offset 0.

use std::os::fd::AsFd;

use super::format::{encode_body, ConstValue, Header, Image, InlineBytes, Instance, ARENA_TAG};
use super::mac::{build_id, device_identity, mac, Binding};
use super::{Cache, CacheError, CacheFiles};
use crate::execute::{CacheParts, VnpuPreparedModel};
use crate::hal::{Model, BYTE_SIZE_OF_CACHE_TOKEN};
use crate::hw::Hardware;

/// The model cache image of a prepared model (its constants' values left out); its
/// program encoded with constants at base 0 and the arena at [`ARENA_TAG`].
pub fn image_of(parts: &CacheParts<'_>) -> Image {
    let instance = parts.instance.as_ref().and_then(|inst| {
        let program = inst.compiled.program(parts.block, 0, ARENA_TAG).ok()?;
        Some(Instance {
            input_shapes: inst.input_shapes.clone(),
            compiled: inst.compiled.clone(),
            program: program.encode(),
            program_ns: inst.program_ns,
        })
    });
    let m = parts.model;
    let constants = parts
        .constants
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let c = c.as_ref()?;
            let v = match parts.block.offsets.get(i).copied().flatten() {
                Some(offset) => ConstValue::Data {
                    offset,
                    len: c.len() as u64,
                    layout: parts.block.layout(i as u32),
                },
                None => ConstValue::Inline(InlineBytes::new(c)),
            };
            Some((i as u32, v))
        })
        .collect();
    Image {
        model: Model {
            main: m.main.clone(),
            referenced: m.referenced.clone(),
            operand_values: Vec::new(),
            pools: Vec::new(),
            relax_computation_float32_to_float16: m.relax_computation_float32_to_float16,
            extension_name_to_prefix: m.extension_name_to_prefix.clone(),
        },
        constants,
        instance,
    }
}

/// The model cache file for `image` whose data cache is `data`, sealed with `key`.
pub fn seal(key: &[u8; 32], binding: &Binding, image: &Image, data: &[u8]) -> Vec<u8> {
    seal_body(key, binding, &encode_body(image), data)
}

/// The model cache file for an encoded body (also what the fuzz target uses to reach
/// past the MAC).
pub fn seal_body(key: &[u8; 32], binding: &Binding, body: &[u8], data: &[u8]) -> Vec<u8> {
    let header = Header {
        body_len: body.len() as u64,
        data_len: data.len() as u64,
        data_digest: super::mac::DataDigest::of(data),
    };
    let mut file = header.encode().to_vec();
    file.extend_from_slice(body);
    let tag = mac(key, binding, &file);
    file.extend_from_slice(&tag);
    file
}

impl Cache {
    /// The MAC's binding for `token` on this device.
    pub fn binding(hw: &Hardware, token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN]) -> Binding {
        Binding {
            token: *token,
            build: build_id(),
            device: device_identity(hw),
        }
    }

    /// Saves `prepared` to `files`. Both files are truncated first; the data cache is
    /// written in full before the model cache is complete. A save that fails (a full
    /// disk) truncates both again, so no partial file is left behind.
    pub fn save(
        &self,
        hw: &Hardware,
        prepared: &VnpuPreparedModel,
        files: &CacheFiles,
        token: &[u8; BYTE_SIZE_OF_CACHE_TOKEN],
    ) -> Result<(), CacheError> {
        let key = self.key()?;
        let parts = prepared.cache_parts();
        let data = parts.block.bytes.as_slice();
        let model = seal(&key, &Self::binding(hw, token), &image_of(&parts), data);
        let written = self
            .io
            .rewrite(&[(files.data.as_fd(), data), (files.model.as_fd(), &model)]);
        if written.is_err() {
            for fd in [&files.model, &files.data] {
                let _ = nix::unistd::ftruncate(fd, 0);
            }
        }
        written?;
        Ok(())
    }
}
