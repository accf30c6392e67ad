/// The binary interface acknowledges nothing: a gateway answers only a
/// notification it refuses, and then closes. A sender proves what was
/// accepted by sending, after it, a notification the gateway must refuse:
/// the error response names it, which proves (by the protocol's ordering)
/// that everything written before it on the connection was accepted.
extension NotificationEncoder {
    /// The payload a proof carries: valid, so the token is the only fault.
    static let proofPayload: [UInt8] = Array(#"{"aps":{}}"#.utf8)

    /// Appends a proof packet naming `identifier` and returns true; false
    /// (and appends nothing) for the simple format, which has no error
    /// responses.
    ///
    /// Its token has an invalid size (status 5): 1 byte in the enhanced
    /// format, 101 bytes in a frame. Never empty, which the gateway answers
    /// with identifier 0 instead of ours. In a frame the identifier item
    /// comes first, so the gateway has read it when it meets the fault.
    @discardableResult
    public static func appendProof(identifier: UInt32, format: NotificationFormat, to buffer: inout [UInt8]) -> Bool {
        switch format {
        case .simple:
            return false
        case .enhanced:
            appendEnhanced(identifier: identifier, expiry: 0, token: [0], payload: proofPayload, to: &buffer)
        case .frame:
            let tokenCount = NotificationDecoder.Limits.apple.frameMaxTokenBytes + 1
            buffer.append(NotificationFormat.frame.command)
            buffer.appendBigEndian(UInt32(7 + 3 + tokenCount + 3 + proofPayload.count))
            buffer.append(Item.identifier.rawValue)
            buffer.appendBigEndian(UInt16(4))
            buffer.appendBigEndian(identifier)
            buffer.append(Item.deviceToken.rawValue)
            buffer.appendBigEndian(UInt16(tokenCount))
            buffer.append(contentsOf: repeatElement(0, count: tokenCount))
            buffer.append(Item.payload.rawValue)
            buffer.appendBigEndian(UInt16(proofPayload.count))
            buffer.append(contentsOf: proofPayload)
        }
        return true
    }

    /// Where the device token lies in `packet`, one packet this encoder
    /// wrote in `format` (in its frames the token is the first item), as
    /// indices of `packet`.
    public static func deviceTokenRange(inPacket packet: ArraySlice<UInt8>, format: NotificationFormat) -> Range<Int> {
        let s = packet.startIndex
        let start: Int, count: Int
        switch format {
        case .simple: (start, count) = (s + 3, Int(packet[s + 1]) << 8 | Int(packet[s + 2]))
        case .enhanced: (start, count) = (s + 11, Int(packet[s + 9]) << 8 | Int(packet[s + 10]))
        case .frame: (start, count) = (s + 8, Int(packet[s + 6]) << 8 | Int(packet[s + 7]))
        }
        return start..<min(packet.endIndex, start + count)
    }
}
