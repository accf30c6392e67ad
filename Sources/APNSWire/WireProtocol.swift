/// How a plan's notifications travel to APNs: as packets of the binary
/// interface in one of its three formats, or as requests of the HTTP/2
/// provider API (`POST /3/device/<token>`, one stream per notification, each
/// answered with a status). Job files and plan headers name it in their
/// `format`: `simple`, `enhanced`, `frame` or `h2`.
public enum WireProtocol: Hashable, Sendable, CustomStringConvertible {
    case binary(NotificationFormat)
    case http2

    /// Every protocol, in the order the names are listed to users.
    public static let allCases: [WireProtocol] = NotificationFormat.allCases.map(WireProtocol.binary) + [.http2]

    /// Parses the names used in job files, plan headers and on the command line.
    public init?(name: String) {
        if name.lowercased() == "h2" { self = .http2; return }
        guard let format = NotificationFormat(name: name) else { return nil }
        self = .binary(format)
    }

    /// The binary format, or nil for HTTP/2.
    public var binaryFormat: NotificationFormat? {
        if case .binary(let format) = self { return format }
        return nil
    }

    public var isHTTP2: Bool { self == .http2 }

    /// The largest payload, in bytes, the gateway accepts. HTTP/2: 4096, and
    /// 5120 for VoIP pushes; this is the larger (the job applies the push type's).
    public var maxPayloadBytes: Int {
        switch self {
        case .binary(let format): format.maxPayloadBytes
        case .http2: 5120
        }
    }

    /// The largest device token, in bytes.
    public var maxTokenBytes: Int {
        switch self {
        case .binary(let format): format.maxTokenBytes
        case .http2: 100
        }
    }

    /// Whether a notification carries a priority (frames and HTTP/2; commands 0 and 1 have none).
    public var carriesPriority: Bool { self == .binary(.frame) || self == .http2 }

    /// The name in job files and plan headers.
    public var description: String {
        switch self {
        case .binary(let format): format.description
        case .http2: "h2"
        }
    }
}
