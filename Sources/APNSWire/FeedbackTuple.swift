/// One entry of the feedback service: `|timestamp (4)|token length (2)|token|`.
///
/// The timestamp is when APNs found the app gone from the device; a provider
/// should keep sending only if the device registered again after it.
public struct FeedbackTuple: Hashable, Sendable {
    /// UNIX seconds, UTC.
    public var timestamp: UInt32
    public var token: [UInt8]

    public init(timestamp: UInt32, token: [UInt8]) {
        self.timestamp = timestamp
        self.token = token
    }

    public func encode(into buffer: inout [UInt8]) {
        buffer.appendBigEndian(timestamp)
        buffer.appendBigEndian(UInt16(token.count))
        buffer.append(contentsOf: token)
    }

    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        encode(into: &out)
        return out
    }
}
