/// A notification as the gateway read it off the wire. The token and payload
/// are slices of the decoder's buffer: reading them copies nothing. Call
/// ``Notification/init(_:)`` to keep one beyond the next `append`.
public struct DecodedNotification: Sendable {
    public var format: NotificationFormat
    public var identifier: UInt32?
    public var expiry: UInt32?
    public var priority: NotificationPriority?
    public var token: ArraySlice<UInt8>
    public var payload: ArraySlice<UInt8>
    /// The packet's size on the wire.
    public var encodedCount: Int
}

extension Notification {
    /// Copies a decoded notification out of the decoder's buffer.
    public init(_ decoded: DecodedNotification) {
        self.init(
            format: decoded.format, token: Array(decoded.token), payload: Array(decoded.payload),
            identifier: decoded.identifier, expiry: decoded.expiry, priority: decoded.priority)
    }
}

/// Why the gateway refuses a packet, with the status it answers and the
/// identifier it names (0 when the packet's identifier could not be read).
public struct NotificationDecodingError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Reason: Hashable, Sendable {
        case unknownCommand(UInt8)
        case missingDeviceToken
        case invalidTokenSize(Int)
        case missingPayload
        case invalidPayloadSize(Int)
        case invalidItemLength(item: UInt8, length: Int)
        case unknownItem(UInt8)
        case duplicateItem(UInt8)
        case itemOverrunsFrame(item: UInt8)
        case invalidPriority(UInt8)
    }

    public var reason: Reason
    /// The status code the gateway answers with.
    public var status: ErrorResponse.Status
    /// The packet's identifier, when the bytes before the fault held one.
    public var identifier: UInt32?
    /// Offset of the refused packet from the start of the stream.
    public var streamOffset: Int

    /// The error-response packet a gateway writes for this error.
    public var errorResponse: ErrorResponse {
        ErrorResponse(status: status, identifier: identifier ?? 0)
    }

    public var description: String {
        let what: String
        switch reason {
        case .unknownCommand(let c): what = "unknown command \(c)"
        case .missingDeviceToken: what = "the device token is missing"
        case .invalidTokenSize(let n): what = "a device token of \(n) bytes is not a valid size"
        case .missingPayload: what = "the payload is missing"
        case .invalidPayloadSize(let n): what = "a payload of \(n) bytes is over the limit"
        case .invalidItemLength(let item, let n): what = "frame item \(item) has invalid length \(n)"
        case .unknownItem(let item): what = "frame item \(item) is not defined"
        case .duplicateItem(let item): what = "frame item \(item) appears twice"
        case .itemOverrunsFrame(let item): what = "frame item \(item) runs past the end of its frame"
        case .invalidPriority(let p): what = "priority \(p) is neither 5 nor 10"
        }
        let id = identifier.map { " (identifier \($0))" } ?? ""
        return "The packet at byte \(streamOffset)\(id) was refused with status \(status): \(what)."
    }
}

/// Decodes notification packets (commands 0, 1 and 2) from a byte stream fed
/// in chunks of any size, as the gateway does.
///
/// Declared lengths are checked against the format's limits as soon as they are
/// read, so a hostile length never makes the decoder wait for, or buffer, more
/// than one valid packet's worth of bytes. After an error the decoder stays
/// failed: the gateway closes the connection and discards the rest.
public struct NotificationDecoder: Sendable {
    /// Size limits; ``apple`` follows the guides.
    public struct Limits: Hashable, Sendable {
        /// Exact token size for commands 0 and 1.
        public var legacyTokenBytes = 32
        public var legacyMaxPayloadBytes = 256
        public var frameMaxTokenBytes = 100
        public var frameMaxPayloadBytes = 2048
        public init() {}
        public static let apple = Limits()
    }

    public let limits: Limits
    private var buffer = ReadBuffer()
    private var failure: NotificationDecodingError?
    /// Bytes decoded into packets so far.
    public private(set) var consumedByteCount = 0

    public init(limits: Limits = .apple) {
        self.limits = limits
    }

    /// Bytes received but not yet decoded.
    public var bufferedByteCount: Int { buffer.readableCount }

    public mutating func append(_ chunk: some Sequence<UInt8>) {
        buffer.append(contentsOf: chunk)
    }

    public mutating func append(_ chunk: UnsafeRawBufferPointer) {
        buffer.append(contentsOf: chunk)
    }

    /// The next complete packet, nil when more bytes are needed, or the reason
    /// the gateway refuses the next packet.
    public mutating func next() throws(NotificationDecodingError) -> DecodedNotification? {
        if let failure { throw failure }
        let result = parse(buffer.bytes, from: buffer.start, end: buffer.bytes.count)
        switch result {
        case .needMore:
            return nil
        case .packet(let n):
            buffer.consume(n.encodedCount)
            consumedByteCount += n.encodedCount
            return n
        case .failure(let reason, let status, let identifier):
            let error = NotificationDecodingError(
                reason: reason, status: status, identifier: identifier, streamOffset: consumedByteCount)
            failure = error
            throw error
        }
    }

    private enum ParseResult {
        case needMore
        case packet(DecodedNotification)
        case failure(NotificationDecodingError.Reason, ErrorResponse.Status, UInt32?)
    }

    private func parse(_ b: [UInt8], from s: Int, end: Int) -> ParseResult {
        guard s < end else { return .needMore }
        switch b[s] {
        case NotificationFormat.simple.command:
            return parseLegacy(b, from: s, end: end, headerCount: 1, format: .simple)
        case NotificationFormat.enhanced.command:
            return parseLegacy(b, from: s, end: end, headerCount: 9, format: .enhanced)
        case NotificationFormat.frame.command:
            return parseFrame(b, from: s, end: end)
        default:
            return .failure(.unknownCommand(b[s]), .protocolError, nil)
        }
    }

    private func parseLegacy(
        _ b: [UInt8], from s: Int, end: Int, headerCount: Int, format: NotificationFormat
    ) -> ParseResult {
        guard end - s >= headerCount + 2 else { return .needMore }
        var identifier: UInt32? = nil
        var expiry: UInt32? = nil
        if format == .enhanced {
            identifier = b.readBigEndianUInt32(at: s + 1)
            expiry = b.readBigEndianUInt32(at: s + 5)
        }
        let tokenCount = Int(b.readBigEndianUInt16(at: s + headerCount))
        if tokenCount == 0 { return .failure(.missingDeviceToken, .missingDeviceToken, identifier) }
        if tokenCount != limits.legacyTokenBytes {
            return .failure(.invalidTokenSize(tokenCount), .invalidTokenSize, identifier)
        }
        let tokenStart = s + headerCount + 2
        guard end - tokenStart >= tokenCount + 2 else { return .needMore }
        let payloadCount = Int(b.readBigEndianUInt16(at: tokenStart + tokenCount))
        if payloadCount == 0 { return .failure(.missingPayload, .missingPayload, identifier) }
        if payloadCount > limits.legacyMaxPayloadBytes {
            return .failure(.invalidPayloadSize(payloadCount), .invalidPayloadSize, identifier)
        }
        let payloadStart = tokenStart + tokenCount + 2
        guard end - payloadStart >= payloadCount else { return .needMore }
        return .packet(DecodedNotification(
            format: format, identifier: identifier, expiry: expiry, priority: nil,
            token: b[tokenStart..<(tokenStart + tokenCount)],
            payload: b[payloadStart..<(payloadStart + payloadCount)],
            encodedCount: payloadStart + payloadCount - s))
    }

    /// Items are checked one by one as their headers arrive; the frame's own
    /// length is trusted only as far as valid items fill it.
    private func parseFrame(_ b: [UInt8], from s: Int, end: Int) -> ParseResult {
        guard end - s >= 5 else { return .needMore }
        let frameCount = Int(b.readBigEndianUInt32(at: s + 1))
        let frameEnd = s + 5 + frameCount
        var p = s + 5
        var token: Range<Int>? = nil
        var payload: Range<Int>? = nil
        var identifier: UInt32? = nil
        var expiry: UInt32? = nil
        var priority: NotificationPriority? = nil
        var seen: UInt8 = 0
        while p < frameEnd {
            guard frameEnd - p >= 3 else {
                // A partial item header at the end of the frame. Wait for its
                // first byte so the error names the same item however the
                // stream was chunked (found by fuzzing).
                guard p < end else { return .needMore }
                return .failure(.itemOverrunsFrame(item: b[p]), .protocolError, identifier)
            }
            guard end - p >= 3 else { return .needMore }
            let item = b[p]
            let count = Int(b.readBigEndianUInt16(at: p + 1))
            guard (1...5).contains(item) else { return .failure(.unknownItem(item), .protocolError, identifier) }
            let bit: UInt8 = 1 << item
            if seen & bit != 0 { return .failure(.duplicateItem(item), .protocolError, identifier) }
            seen |= bit
            switch NotificationEncoder.Item(rawValue: item)! {
            case .deviceToken:
                if count == 0 { return .failure(.missingDeviceToken, .missingDeviceToken, identifier) }
                if count > limits.frameMaxTokenBytes {
                    return .failure(.invalidTokenSize(count), .invalidTokenSize, identifier)
                }
            case .payload:
                if count == 0 { return .failure(.missingPayload, .missingPayload, identifier) }
                if count > limits.frameMaxPayloadBytes {
                    return .failure(.invalidPayloadSize(count), .invalidPayloadSize, identifier)
                }
            case .identifier, .expiry:
                if count != 4 { return .failure(.invalidItemLength(item: item, length: count), .protocolError, identifier) }
            case .priority:
                if count != 1 { return .failure(.invalidItemLength(item: item, length: count), .protocolError, identifier) }
            }
            let dataStart = p + 3
            if dataStart + count > frameEnd { return .failure(.itemOverrunsFrame(item: item), .protocolError, identifier) }
            guard end - dataStart >= count else { return .needMore }
            switch NotificationEncoder.Item(rawValue: item)! {
            case .deviceToken: token = dataStart..<(dataStart + count)
            case .payload: payload = dataStart..<(dataStart + count)
            case .identifier: identifier = b.readBigEndianUInt32(at: dataStart)
            case .expiry: expiry = b.readBigEndianUInt32(at: dataStart)
            case .priority:
                let value = NotificationPriority(rawValue: b[dataStart])
                guard value.isDefined else { return .failure(.invalidPriority(value.rawValue), .protocolError, identifier) }
                priority = value
            }
            p = dataStart + count
        }
        guard let token else { return .failure(.missingDeviceToken, .missingDeviceToken, identifier) }
        guard let payload else { return .failure(.missingPayload, .missingPayload, identifier) }
        return .packet(DecodedNotification(
            format: .frame, identifier: identifier, expiry: expiry, priority: priority,
            token: b[token], payload: b[payload], encodedCount: frameEnd - s))
    }
}
