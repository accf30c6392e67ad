/// A byte stream from the gateway or the feedback service that does not follow
/// the protocol.
public struct ResponseDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Reason: Hashable, Sendable {
        /// The gateway sent a byte other than command 8 where a packet starts.
        case unexpectedCommand(UInt8)
        /// A feedback tuple declared a token longer than any device token.
        case tokenTooLong(Int)
        /// A feedback tuple declared an empty token.
        case emptyToken
    }

    public var reason: Reason
    /// Offset of the bad packet from the start of the stream.
    public var streamOffset: Int

    public var description: String {
        switch reason {
        case .unexpectedCommand(let c):
            "The gateway sent command \(c) at byte \(streamOffset) where only error responses (command 8) may come."
        case .tokenTooLong(let n):
            "The feedback tuple at byte \(streamOffset) declares a \(n)-byte token, longer than any device token."
        case .emptyToken:
            "The feedback tuple at byte \(streamOffset) declares an empty token."
        }
    }
}

/// Decodes error-response packets from the gateway's side of a connection,
/// fed in chunks of any size.
public struct ErrorResponseDecoder: Sendable {
    private var buffer = ReadBuffer()
    private var consumed = 0
    private var failure: ResponseDecodingError?

    public init() {}

    public var bufferedByteCount: Int { buffer.readableCount }

    public mutating func append(_ chunk: some Sequence<UInt8>) { buffer.append(contentsOf: chunk) }
    public mutating func append(_ chunk: UnsafeRawBufferPointer) { buffer.append(contentsOf: chunk) }

    /// The next complete packet, or nil when more bytes are needed.
    public mutating func next() throws(ResponseDecodingError) -> ErrorResponse? {
        if let failure { throw failure }
        let b = buffer.bytes, s = buffer.start
        guard buffer.readableCount >= 1 else { return nil }
        guard b[s] == ErrorResponse.command else {
            let error = ResponseDecodingError(reason: .unexpectedCommand(b[s]), streamOffset: consumed)
            failure = error
            throw error
        }
        guard buffer.readableCount >= ErrorResponse.encodedCount else { return nil }
        let response = ErrorResponse(
            status: .init(rawValue: b[s + 1]), identifier: b.readBigEndianUInt32(at: s + 2))
        buffer.consume(ErrorResponse.encodedCount)
        consumed += ErrorResponse.encodedCount
        return response
    }
}

/// Decodes feedback tuples from the feedback service, fed in chunks of any size.
public struct FeedbackTupleDecoder: Sendable {
    /// The longest token accepted: the frame format's limit.
    public static let maxTokenBytes = 100

    private var buffer = ReadBuffer()
    private var consumed = 0
    private var failure: ResponseDecodingError?

    public init() {}

    /// Bytes of an incomplete tuple; non-zero when the stream ends mid-tuple.
    public var bufferedByteCount: Int { buffer.readableCount }

    public mutating func append(_ chunk: some Sequence<UInt8>) { buffer.append(contentsOf: chunk) }
    public mutating func append(_ chunk: UnsafeRawBufferPointer) { buffer.append(contentsOf: chunk) }

    public mutating func next() throws(ResponseDecodingError) -> FeedbackTuple? {
        if let failure { throw failure }
        let b = buffer.bytes, s = buffer.start
        guard buffer.readableCount >= 6 else { return nil }
        let count = Int(b.readBigEndianUInt16(at: s + 4))
        if count == 0 || count > Self.maxTokenBytes {
            let error = ResponseDecodingError(
                reason: count == 0 ? .emptyToken : .tokenTooLong(count), streamOffset: consumed)
            failure = error
            throw error
        }
        guard buffer.readableCount >= 6 + count else { return nil }
        let tuple = FeedbackTuple(timestamp: b.readBigEndianUInt32(at: s), token: Array(b[(s + 6)..<(s + 6 + count)]))
        buffer.consume(6 + count)
        consumed += 6 + count
        return tuple
    }
}
