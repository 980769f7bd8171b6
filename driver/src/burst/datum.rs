//! The burst's packets: `FmqRequestDatum` and `FmqResultDatum` (HAL 1.2) as 24-byte queue
//! elements, and the packet rules: the element order, the counts and `packetSize`.
//!
//! Byte layout: a u8 discriminator at offset 0 (the union member, in declaration order),
//! then the union: at offset 4 in a request datum (its members are 4-byte aligned), at
//! offset 8 in a result datum (the timing's u64s). Every byte not part of the member is
//! zero when we write it (the sanitized-padding rule), and a datum read from the queue is
//! checked member by member: an unknown discriminator or a bool that is neither 0 nor 1 is
//! malformed.

use super::fmq::{Element, ELEMENT};
use crate::hal::{
    DataLocation, ErrorStatus, MeasureTiming, OutputShape, Request, RequestArgument, Timing,
};

/// `FmqRequestDatum::OperandInformation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperandInformation {
    /// The argument is omitted.
    pub has_no_value: bool,
    /// Where its data is.
    pub location: DataLocation,
    /// How many dimension elements follow.
    pub number_of_dimensions: u32,
}

/// `FmqRequestDatum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestDatum {
    /// 0: the packet's element count (including this one) and what it holds.
    PacketInformation {
        /// Elements in the packet.
        packet_size: u32,
        /// Inputs.
        inputs: u32,
        /// Outputs.
        outputs: u32,
        /// Pools (slots).
        pools: u32,
    },
    /// 1.
    InputOperandInformation(OperandInformation),
    /// 2.
    InputOperandDimensionValue(u32),
    /// 3.
    OutputOperandInformation(OperandInformation),
    /// 4.
    OutputOperandDimensionValue(u32),
    /// 5: a memory's slot.
    PoolIdentifier(i32),
    /// 6.
    MeasureTiming(i32),
}

/// `FmqResultDatum`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResultDatum {
    /// 0: the packet's element count (including this one), the status and the outputs.
    PacketInformation {
        /// Elements in the packet.
        packet_size: u32,
        /// The execution's status.
        error_status: i32,
        /// Output shapes that follow.
        operands: u32,
    },
    /// 1.
    OperandInformation {
        /// Whether the output buffer was large enough.
        is_sufficient: bool,
        /// How many dimension elements follow.
        number_of_dimensions: u32,
    },
    /// 2.
    OperandDimensionValue(u32),
    /// 3.
    ExecutionTiming(Timing),
}

/// A datum or packet that breaks the rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// An element that is no datum of this kind.
    #[error("malformed datum at element {0}")]
    Datum(usize),
    /// The elements are not in the packet's order, or the counts disagree.
    #[error("ill-formed packet: {0}")]
    Packet(&'static str),
}

fn put_u32(e: &mut Element, at: usize, v: u32) {
    e[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

fn get_u32(e: &Element, at: usize) -> u32 {
    u32::from_le_bytes([e[at], e[at + 1], e[at + 2], e[at + 3]])
}

fn put_u64(e: &mut Element, at: usize, v: u64) {
    e[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn get_u64(e: &Element, at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&e[at..at + 8]);
    u64::from_le_bytes(b)
}

fn get_bool(e: &Element, at: usize) -> Option<bool> {
    match e[at] {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Request union offset.
const RQ: usize = 4;
/// Result union offset.
const RS: usize = 8;

impl OperandInformation {
    fn put(&self, e: &mut Element) {
        e[RQ] = u8::from(self.has_no_value);
        put_u32(e, RQ + 4, self.location.pool_index);
        put_u32(e, RQ + 8, self.location.offset);
        put_u32(e, RQ + 12, self.location.length);
        put_u32(e, RQ + 16, self.number_of_dimensions);
    }

    fn get(e: &Element) -> Option<OperandInformation> {
        Some(OperandInformation {
            has_no_value: get_bool(e, RQ)?,
            location: DataLocation {
                pool_index: get_u32(e, RQ + 4),
                offset: get_u32(e, RQ + 8),
                length: get_u32(e, RQ + 12),
            },
            number_of_dimensions: get_u32(e, RQ + 16),
        })
    }
}

impl RequestDatum {
    /// The queue element (padding zeroed).
    pub fn encode(&self) -> Element {
        let mut e = [0u8; ELEMENT];
        match *self {
            RequestDatum::PacketInformation {
                packet_size,
                inputs,
                outputs,
                pools,
            } => {
                e[0] = 0;
                put_u32(&mut e, RQ, packet_size);
                put_u32(&mut e, RQ + 4, inputs);
                put_u32(&mut e, RQ + 8, outputs);
                put_u32(&mut e, RQ + 12, pools);
            }
            RequestDatum::InputOperandInformation(i) => {
                e[0] = 1;
                i.put(&mut e);
            }
            RequestDatum::InputOperandDimensionValue(v) => {
                e[0] = 2;
                put_u32(&mut e, RQ, v);
            }
            RequestDatum::OutputOperandInformation(i) => {
                e[0] = 3;
                i.put(&mut e);
            }
            RequestDatum::OutputOperandDimensionValue(v) => {
                e[0] = 4;
                put_u32(&mut e, RQ, v);
            }
            RequestDatum::PoolIdentifier(s) => {
                e[0] = 5;
                put_u32(&mut e, RQ, s as u32);
            }
            RequestDatum::MeasureTiming(m) => {
                e[0] = 6;
                put_u32(&mut e, RQ, m as u32);
            }
        }
        e
    }

    /// The datum an element holds, if it is one.
    pub fn decode(e: &Element) -> Option<RequestDatum> {
        Some(match e[0] {
            0 => RequestDatum::PacketInformation {
                packet_size: get_u32(e, RQ),
                inputs: get_u32(e, RQ + 4),
                outputs: get_u32(e, RQ + 8),
                pools: get_u32(e, RQ + 12),
            },
            1 => RequestDatum::InputOperandInformation(OperandInformation::get(e)?),
            2 => RequestDatum::InputOperandDimensionValue(get_u32(e, RQ)),
            3 => RequestDatum::OutputOperandInformation(OperandInformation::get(e)?),
            4 => RequestDatum::OutputOperandDimensionValue(get_u32(e, RQ)),
            5 => RequestDatum::PoolIdentifier(get_u32(e, RQ) as i32),
            6 => RequestDatum::MeasureTiming(get_u32(e, RQ) as i32),
            _ => return None,
        })
    }
}

impl ResultDatum {
    /// The queue element (padding zeroed).
    pub fn encode(&self) -> Element {
        let mut e = [0u8; ELEMENT];
        match *self {
            ResultDatum::PacketInformation {
                packet_size,
                error_status,
                operands,
            } => {
                e[0] = 0;
                put_u32(&mut e, RS, packet_size);
                put_u32(&mut e, RS + 4, error_status as u32);
                put_u32(&mut e, RS + 8, operands);
            }
            ResultDatum::OperandInformation {
                is_sufficient,
                number_of_dimensions,
            } => {
                e[0] = 1;
                e[RS] = u8::from(is_sufficient);
                put_u32(&mut e, RS + 4, number_of_dimensions);
            }
            ResultDatum::OperandDimensionValue(v) => {
                e[0] = 2;
                put_u32(&mut e, RS, v);
            }
            ResultDatum::ExecutionTiming(t) => {
                e[0] = 3;
                put_u64(&mut e, RS, t.time_on_device);
                put_u64(&mut e, RS + 8, t.time_in_driver);
            }
        }
        e
    }

    /// The datum an element holds, if it is one.
    pub fn decode(e: &Element) -> Option<ResultDatum> {
        Some(match e[0] {
            0 => ResultDatum::PacketInformation {
                packet_size: get_u32(e, RS),
                error_status: get_u32(e, RS + 4) as i32,
                operands: get_u32(e, RS + 8),
            },
            1 => ResultDatum::OperandInformation {
                is_sufficient: get_bool(e, RS)?,
                number_of_dimensions: get_u32(e, RS + 4),
            },
            2 => ResultDatum::OperandDimensionValue(get_u32(e, RS)),
            3 => ResultDatum::ExecutionTiming(Timing {
                time_on_device: get_u64(e, RS),
                time_in_driver: get_u64(e, RS + 8),
            }),
            _ => return None,
        })
    }
}

/// A request as a packet: the request's arguments (its pools named by `slots`) and the
/// timing wish.
pub fn serialize_request(request: &Request, slots: &[i32], measure: MeasureTiming) -> Vec<Element> {
    let count = 2
        + slots.len()
        + request
            .inputs
            .iter()
            .chain(&request.outputs)
            .map(|a| 1 + a.dimensions.len())
            .sum::<usize>();
    // Encoded as they are made: one allocation, no list of data in between.
    let mut out = Vec::with_capacity(count);
    out.push(
        RequestDatum::PacketInformation {
            packet_size: count as u32,
            inputs: request.inputs.len() as u32,
            outputs: request.outputs.len() as u32,
            pools: slots.len() as u32,
        }
        .encode(),
    );
    let info = |a: &RequestArgument| OperandInformation {
        has_no_value: a.has_no_value,
        location: a.location,
        number_of_dimensions: a.dimensions.len() as u32,
    };
    for a in &request.inputs {
        out.push(RequestDatum::InputOperandInformation(info(a)).encode());
        out.extend(
            a.dimensions
                .iter()
                .map(|&d| RequestDatum::InputOperandDimensionValue(d).encode()),
        );
    }
    for a in &request.outputs {
        out.push(RequestDatum::OutputOperandInformation(info(a)).encode());
        out.extend(
            a.dimensions
                .iter()
                .map(|&d| RequestDatum::OutputOperandDimensionValue(d).encode()),
        );
    }
    out.extend(
        slots
            .iter()
            .map(|&s| RequestDatum::PoolIdentifier(s).encode()),
    );
    out.push(RequestDatum::MeasureTiming(measure.0).encode());
    out
}

/// What a request packet carries: the arguments (the request's pools empty), the slots
/// naming its pools, in order, and the timing wish.
pub type RequestPacket = (Request, Vec<i32>, MeasureTiming);

/// Reads a request packet strictly: the element order, the counts, `packetSize` equal to
/// the elements received, nothing left over.
pub fn deserialize_request(packet: &[Element]) -> Result<RequestPacket, PacketError> {
    let mut data = Vec::with_capacity(packet.len());
    for (i, e) in packet.iter().enumerate() {
        data.push(RequestDatum::decode(e).ok_or(PacketError::Datum(i))?);
    }
    let mut it = data.iter().copied();
    let Some(RequestDatum::PacketInformation {
        packet_size,
        inputs,
        outputs,
        pools,
    }) = it.next()
    else {
        return Err(PacketError::Packet("no packet information first"));
    };
    if packet_size as usize != data.len() {
        return Err(PacketError::Packet(
            "packetSize differs from the elements received",
        ));
    }
    // Each argument takes at least one element: counts past the packet are lies.
    if inputs as usize + outputs as usize + pools as usize + 2 > data.len() {
        return Err(PacketError::Packet("counts exceed the packet"));
    }
    let mut arguments = |n: u32, output: bool| -> Result<Vec<RequestArgument>, PacketError> {
        let mut args = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let info = match (it.next(), output) {
                (Some(RequestDatum::InputOperandInformation(i)), false)
                | (Some(RequestDatum::OutputOperandInformation(i)), true) => i,
                _ => return Err(PacketError::Packet("operand information expected")),
            };
            if info.number_of_dimensions as usize > data.len() {
                return Err(PacketError::Packet("dimension count exceeds the packet"));
            }
            let mut dimensions = Vec::with_capacity(info.number_of_dimensions as usize);
            for _ in 0..info.number_of_dimensions {
                match (it.next(), output) {
                    (Some(RequestDatum::InputOperandDimensionValue(d)), false)
                    | (Some(RequestDatum::OutputOperandDimensionValue(d)), true) => {
                        dimensions.push(d)
                    }
                    _ => return Err(PacketError::Packet("dimension value expected")),
                }
            }
            args.push(RequestArgument {
                has_no_value: info.has_no_value,
                location: info.location,
                dimensions,
            });
        }
        Ok(args)
    };
    let inputs = arguments(inputs, false)?;
    let outputs = arguments(outputs, true)?;
    let mut slots = Vec::with_capacity(pools as usize);
    for _ in 0..pools {
        match it.next() {
            Some(RequestDatum::PoolIdentifier(s)) => slots.push(s),
            _ => return Err(PacketError::Packet("pool identifier expected")),
        }
    }
    let Some(RequestDatum::MeasureTiming(m)) = it.next() else {
        return Err(PacketError::Packet("measureTiming expected"));
    };
    if it.next().is_some() {
        return Err(PacketError::Packet("trailing elements"));
    }
    let request = Request {
        inputs,
        outputs,
        pools: Vec::new(),
    };
    Ok((request, slots, MeasureTiming(m)))
}

/// A result as a packet: 2 + outputs + Σ dimensions elements.
pub fn serialize_result(
    status: ErrorStatus,
    shapes: &[OutputShape],
    timing: Timing,
) -> Vec<Element> {
    let count = 2 + shapes.iter().map(|s| 1 + s.dimensions.len()).sum::<usize>();
    let mut out = Vec::with_capacity(count);
    out.push(
        ResultDatum::PacketInformation {
            packet_size: count as u32,
            error_status: status as i32,
            operands: shapes.len() as u32,
        }
        .encode(),
    );
    for s in shapes {
        out.push(
            ResultDatum::OperandInformation {
                is_sufficient: s.is_sufficient,
                number_of_dimensions: s.dimensions.len() as u32,
            }
            .encode(),
        );
        out.extend(
            s.dimensions
                .iter()
                .map(|&d| ResultDatum::OperandDimensionValue(d).encode()),
        );
    }
    out.push(ResultDatum::ExecutionTiming(timing).encode());
    out
}

/// What a result packet carries.
pub type ResultPacket = (ErrorStatus, Vec<OutputShape>, Timing);

/// Reads a result packet strictly (the service is not trusted either).
pub fn deserialize_result(packet: &[Element]) -> Result<ResultPacket, PacketError> {
    // Every element is decoded before the packet is read (a malformed one anywhere is
    // that error, whatever else is wrong), without a list of data in between.
    if let Some(i) = packet.iter().position(|e| ResultDatum::decode(e).is_none()) {
        return Err(PacketError::Datum(i));
    }
    let len = packet.len();
    let mut it = packet.iter().filter_map(ResultDatum::decode);
    let Some(ResultDatum::PacketInformation {
        packet_size,
        error_status,
        operands,
    }) = it.next()
    else {
        return Err(PacketError::Packet("no packet information first"));
    };
    if packet_size as usize != len || operands as usize + 2 > len {
        return Err(PacketError::Packet(
            "packetSize differs from the elements received",
        ));
    }
    let status =
        ErrorStatus::from_i32(error_status).ok_or(PacketError::Packet("unknown error status"))?;
    let mut shapes = Vec::with_capacity(operands as usize);
    for _ in 0..operands {
        let Some(ResultDatum::OperandInformation {
            is_sufficient,
            number_of_dimensions,
        }) = it.next()
        else {
            return Err(PacketError::Packet("operand information expected"));
        };
        if number_of_dimensions as usize > len {
            return Err(PacketError::Packet("dimension count exceeds the packet"));
        }
        let mut dimensions = Vec::with_capacity(number_of_dimensions as usize);
        for _ in 0..number_of_dimensions {
            match it.next() {
                Some(ResultDatum::OperandDimensionValue(d)) => dimensions.push(d),
                _ => return Err(PacketError::Packet("dimension value expected")),
            }
        }
        shapes.push(OutputShape {
            dimensions,
            is_sufficient,
        });
    }
    let Some(ResultDatum::ExecutionTiming(timing)) = it.next() else {
        return Err(PacketError::Packet("executionTiming expected"));
    };
    if it.next().is_some() {
        return Err(PacketError::Packet("trailing elements"));
    }
    Ok((status, shapes, timing))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn argument() -> impl Strategy<Value = RequestArgument> {
        (
            any::<bool>(),
            any::<(u32, u32, u32)>(),
            proptest::collection::vec(any::<u32>(), 0..5),
        )
            .prop_map(|(has_no_value, (p, o, l), dimensions)| RequestArgument {
                has_no_value,
                location: DataLocation {
                    pool_index: p,
                    offset: o,
                    length: l,
                },
                dimensions,
            })
    }

    proptest! {
        /// A request survives the packet round trip; cutting, extending or reordering
        /// the packet is refused.
        #[test]
        fn request_round_trip(
            inputs in proptest::collection::vec(argument(), 0..4),
            outputs in proptest::collection::vec(argument(), 0..4),
            slots in proptest::collection::vec(any::<i32>(), 0..4),
            measure in 0i32..2,
        ) {
            let request = Request { inputs, outputs, pools: Vec::new() };
            let packet = serialize_request(&request, &slots, MeasureTiming(measure));
            let (back, s, m) = deserialize_request(&packet).unwrap();
            prop_assert_eq!(back, request);
            prop_assert_eq!(s, slots);
            prop_assert_eq!(m, MeasureTiming(measure));
            prop_assert!(deserialize_request(&packet[..packet.len() - 1]).is_err());
            let mut longer = packet.clone();
            longer.push(packet[packet.len() - 1]);
            prop_assert!(deserialize_request(&longer).is_err());
        }

        /// A result survives its round trip, and every padding byte is zero.
        #[test]
        fn result_round_trip_and_sanitized(
            shapes in proptest::collection::vec(
                (proptest::collection::vec(any::<u32>(), 0..5), any::<bool>()), 0..4),
            timing in any::<(u64, u64)>(),
        ) {
            let shapes: Vec<OutputShape> = shapes
                .into_iter()
                .map(|(dimensions, is_sufficient)| OutputShape { dimensions, is_sufficient })
                .collect();
            let timing = Timing { time_on_device: timing.0, time_in_driver: timing.1 };
            let packet = serialize_result(ErrorStatus::None, &shapes, timing);
            prop_assert_eq!(packet.len(), 2 + shapes.iter().map(|s| 1 + s.dimensions.len()).sum::<usize>());
            for e in &packet {
                prop_assert!(e[1..RS].iter().all(|&b| b == 0), "discriminator padding");
                if e[0] == 1 {
                    prop_assert!(e[RS + 1..RS + 4].iter().all(|&b| b == 0), "operand padding");
                    prop_assert!(e[RS + 8..].iter().all(|&b| b == 0));
                }
            }
            let (s, back, t) = deserialize_result(&packet).unwrap();
            prop_assert_eq!(s, ErrorStatus::None);
            prop_assert_eq!(back, shapes);
            prop_assert_eq!(t, timing);
        }

        /// Arbitrary elements never panic the decoders.
        #[test]
        fn arbitrary_elements_are_safe(raw in proptest::collection::vec(any::<[u8; 24]>(), 0..20)) {
            let _ = deserialize_request(&raw);
            let _ = deserialize_result(&raw);
        }
    }

    #[test]
    fn bools_other_than_0_or_1_are_malformed() {
        let mut e = RequestDatum::InputOperandInformation(OperandInformation {
            has_no_value: true,
            location: DataLocation::default(),
            number_of_dimensions: 0,
        })
        .encode();
        e[RQ] = 2;
        assert_eq!(RequestDatum::decode(&e), None);
        e[0] = 7;
        assert_eq!(RequestDatum::decode(&e), None);
    }
}
