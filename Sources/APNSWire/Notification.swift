/// One push notification as it travels on the binary interface.
///
/// Which fields are sent depends on ``format``: the simple format sends only
/// the token and payload; the enhanced format always sends an identifier and an
/// expiry (zero when nil); a frame sends each item that is present.
public struct Notification: Hashable, Sendable {
    public var format: NotificationFormat
    public var token: [UInt8]
    public var payload: [UInt8]
    /// Opaque value the gateway echoes in an error response.
    public var identifier: UInt32?
    /// UNIX seconds after which the gateway may discard the notification; 0 means
    /// do not store it.
    public var expiry: UInt32?
    /// Frames only.
    public var priority: NotificationPriority?

    public init(
        format: NotificationFormat,
        token: [UInt8],
        payload: [UInt8],
        identifier: UInt32? = nil,
        expiry: UInt32? = nil,
        priority: NotificationPriority? = nil
    ) {
        self.format = format
        self.token = token
        self.payload = payload
        self.identifier = identifier
        self.expiry = expiry
        self.priority = priority
    }

    /// The encoded size in bytes.
    public var encodedCount: Int {
        NotificationEncoder.encodedCount(
            format: format, tokenCount: token.count, payloadCount: payload.count,
            hasIdentifier: identifier != nil, hasExpiry: expiry != nil, hasPriority: priority != nil)
    }

    /// Appends the packet to `buffer`.
    public func encode(into buffer: inout [UInt8]) {
        switch format {
        case .simple:
            NotificationEncoder.appendSimple(token: token, payload: payload, to: &buffer)
        case .enhanced:
            NotificationEncoder.appendEnhanced(
                identifier: identifier ?? 0, expiry: expiry ?? 0, token: token, payload: payload, to: &buffer)
        case .frame:
            NotificationEncoder.appendFrame(
                token: token, payload: payload, identifier: identifier, expiry: expiry,
                priority: priority, to: &buffer)
        }
    }

    /// The packet as a new array.
    public func encoded() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(encodedCount)
        encode(into: &out)
        return out
    }
}

/// Appends packets to a caller-owned buffer. The buffer is reused across
/// notifications, so encoding allocates nothing once it has grown.
///
/// The encoder writes what it is given, including sizes the gateway will
/// refuse: the sender relies on that to provoke an error response on purpose.
/// Lengths must fit the wire's 16-bit fields; anything larger is a programming
/// error and traps.
public enum NotificationEncoder {
    /// Frame item identifiers from the binary provider API, table A-3.
    public enum Item: UInt8, Sendable {
        case deviceToken = 1
        case payload = 2
        case identifier = 3
        case expiry = 4
        case priority = 5
    }

    /// `|0|token length (2)|token|payload length (2)|payload|`
    @inlinable
    public static func appendSimple(
        token: some Collection<UInt8>, payload: some Collection<UInt8>, to buffer: inout [UInt8]
    ) {
        buffer.append(NotificationFormat.simple.command)
        buffer.appendBigEndian(UInt16(token.count))
        buffer.append(contentsOf: token)
        buffer.appendBigEndian(UInt16(payload.count))
        buffer.append(contentsOf: payload)
    }

    /// `|1|identifier (4)|expiry (4)|token length (2)|token|payload length (2)|payload|`
    ///
    /// The 2011 guide's listing copies the identifier in host order, since the
    /// gateway only echoes it; we write it big-endian like every other field,
    /// so the bytes are the same on every machine.
    @inlinable
    public static func appendEnhanced(
        identifier: UInt32, expiry: UInt32,
        token: some Collection<UInt8>, payload: some Collection<UInt8>, to buffer: inout [UInt8]
    ) {
        buffer.append(NotificationFormat.enhanced.command)
        buffer.appendBigEndian(identifier)
        buffer.appendBigEndian(expiry)
        buffer.appendBigEndian(UInt16(token.count))
        buffer.append(contentsOf: token)
        buffer.appendBigEndian(UInt16(payload.count))
        buffer.append(contentsOf: payload)
    }

    /// `|2|frame length (4)|items…|`, each item `|id (1)|length (2)|data|`, in
    /// the order token, payload, identifier, expiry, priority. Absent optional
    /// items are left out.
    @inlinable
    public static func appendFrame(
        token: some Collection<UInt8>, payload: some Collection<UInt8>,
        identifier: UInt32?, expiry: UInt32?, priority: NotificationPriority?,
        to buffer: inout [UInt8]
    ) {
        let length = frameDataCount(
            tokenCount: token.count, payloadCount: payload.count,
            hasIdentifier: identifier != nil, hasExpiry: expiry != nil, hasPriority: priority != nil)
        buffer.append(NotificationFormat.frame.command)
        buffer.appendBigEndian(UInt32(length))
        buffer.append(Item.deviceToken.rawValue)
        buffer.appendBigEndian(UInt16(token.count))
        buffer.append(contentsOf: token)
        buffer.append(Item.payload.rawValue)
        buffer.appendBigEndian(UInt16(payload.count))
        buffer.append(contentsOf: payload)
        if let identifier {
            buffer.append(Item.identifier.rawValue)
            buffer.appendBigEndian(UInt16(4))
            buffer.appendBigEndian(identifier)
        }
        if let expiry {
            buffer.append(Item.expiry.rawValue)
            buffer.appendBigEndian(UInt16(4))
            buffer.appendBigEndian(expiry)
        }
        if let priority {
            buffer.append(Item.priority.rawValue)
            buffer.appendBigEndian(UInt16(1))
            buffer.append(priority.rawValue)
        }
    }

    @inlinable
    static func frameDataCount(
        tokenCount: Int, payloadCount: Int, hasIdentifier: Bool, hasExpiry: Bool, hasPriority: Bool
    ) -> Int {
        3 + tokenCount + 3 + payloadCount + (hasIdentifier ? 7 : 0) + (hasExpiry ? 7 : 0) + (hasPriority ? 4 : 0)
    }

    /// The encoded size of a packet, header included.
    public static func encodedCount(
        format: NotificationFormat, tokenCount: Int, payloadCount: Int,
        hasIdentifier: Bool = true, hasExpiry: Bool = true, hasPriority: Bool = true
    ) -> Int {
        switch format {
        case .simple: 1 + 2 + tokenCount + 2 + payloadCount
        case .enhanced: 1 + 4 + 4 + 2 + tokenCount + 2 + payloadCount
        case .frame:
            5 + frameDataCount(
                tokenCount: tokenCount, payloadCount: payloadCount,
                hasIdentifier: hasIdentifier, hasExpiry: hasExpiry, hasPriority: hasPriority)
        }
    }
}
