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
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in planChecksum.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x0000_0100_0000_01B3
        }
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
