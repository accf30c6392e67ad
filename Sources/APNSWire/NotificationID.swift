/// The `apns-id` header of a plan record on HTTP/2: a UUID made of the plan's
/// checksum and the record's seq, so a notification sent twice (a resend, a
/// resume) carries the same id, and a duplicate shows as one id twice in the
/// gateway's or the user's logs.
///
/// Layout (RFC 9562 version 8, "custom"): bytes 0–7 are FNV-1a-64 of the
/// checksum text, bytes 8–15 the seq, big-endian; then the version nibble (8)
/// and the variant bits (10) are set over the hash's byte 6 and the seq's
/// two highest bits (zero for any real plan: seqs stay below 2^62).
public enum NotificationID {
    public static func uuid(planChecksum: String, seq: UInt64) -> String {
        uuid(hash: hash(planChecksum: planChecksum), seq: seq)
    }

    /// The first half of every id of a plan (FNV-1a-64 of its checksum text), computed once.
    public static func hash(planChecksum: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in planChecksum.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
        return hash
    }

    /// Writes the 36 characters of the id into `out` (lowercase, 8-4-4-4-12), without allocating.
    @inline(__always)
    public static func write(hash: UInt64, seq: UInt64, to out: UnsafeMutablePointer<UInt8>) {
        let digits: StaticString = "0123456789abcdef"
        var i = 0
        func put(_ byte: UInt8) {
            if i == 8 || i == 13 || i == 18 || i == 23 { out[i] = UInt8(ascii: "-"); i += 1 }
            digits.withUTF8Buffer { d in
                out[i] = d[Int(byte >> 4)]
                out[i + 1] = d[Int(byte & 0x0F)]
            }
            i += 2
        }
        for k in 0..<8 {
            var b = UInt8(truncatingIfNeeded: hash >> UInt64(56 - 8 * k))
            if k == 6 { b = b & 0x0F | 0x80 }
            put(b)
        }
        for k in 0..<8 {
            var b = UInt8(truncatingIfNeeded: seq >> UInt64(56 - 8 * k))
            if k == 0 { b = b & 0x3F | 0x80 }
            put(b)
        }
    }

    public static func uuid(hash: UInt64, seq: UInt64) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: hash >> UInt64(shift))) }
        for shift in stride(from: 56, through: 0, by: -8) { bytes.append(UInt8(truncatingIfNeeded: seq >> UInt64(shift))) }
        bytes[6] = bytes[6] & 0x0F | 0x80
        bytes[8] = bytes[8] & 0x3F | 0x80
        var hex: [UInt8] = []
        HexEncoding.append(bytes, to: &hex)
        let text = String(decoding: hex, as: UTF8.self)
        func part(_ a: Int, _ b: Int) -> Substring { text.dropFirst(a).prefix(b - a) }
        return "\(part(0, 8))-\(part(8, 12))-\(part(12, 16))-\(part(16, 20))-\(part(20, 32))"
    }
}
