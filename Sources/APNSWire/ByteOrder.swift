// Big-endian (network order) helpers. Every integer on the APNs binary
// interface is big-endian; these keep the codecs free of manual shifts.

extension Array where Element == UInt8 {
    /// Appends `value` in network order.
    @inlinable
    public mutating func appendBigEndian(_ value: UInt16) {
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    /// Appends `value` in network order.
    @inlinable
    public mutating func appendBigEndian(_ value: UInt32) {
        append(UInt8(truncatingIfNeeded: value >> 24))
        append(UInt8(truncatingIfNeeded: value >> 16))
        append(UInt8(truncatingIfNeeded: value >> 8))
        append(UInt8(truncatingIfNeeded: value))
    }

    @inlinable
    func readBigEndianUInt16(at index: Int) -> UInt16 {
        UInt16(self[index]) << 8 | UInt16(self[index + 1])
    }

    @inlinable
    func readBigEndianUInt32(at index: Int) -> UInt32 {
        UInt32(self[index]) << 24 | UInt32(self[index + 1]) << 16
            | UInt32(self[index + 2]) << 8 | UInt32(self[index + 3])
    }
}

/// A growable byte buffer that streaming decoders fill in arbitrary chunks and
/// consume from the front. Consumed bytes are reclaimed lazily, on the next
/// append, so decoding many packets from one read costs no copying per packet.
struct ReadBuffer: Sendable {
    private(set) var bytes: [UInt8] = []
    private(set) var start = 0

    var readableCount: Int { bytes.count - start }

    mutating func append(contentsOf chunk: some Sequence<UInt8>) {
        compact()
        bytes.append(contentsOf: chunk)
    }

    mutating func append(contentsOf chunk: UnsafeRawBufferPointer) {
        compact()
        bytes.append(contentsOf: chunk)
    }

    mutating func consume(_ count: Int) {
        start += count
        if start == bytes.count {
            bytes.removeAll(keepingCapacity: true)
            start = 0
        }
    }

    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        start = 0
    }

    private mutating func compact() {
        if start > 0 {
            bytes.removeSubrange(0..<start)
            start = 0
        }
    }
}
