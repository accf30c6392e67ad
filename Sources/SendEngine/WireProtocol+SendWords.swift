import APNSWire

/// What the sender and its report need to know of a protocol, asked of it
/// rather than tested for by name: a new protocol answers these here.
extension WireProtocol {
    /// Whether the pool of connections may grow past the count it started
    /// with (each HTTP/2 stream stands alone); the report then tells its size.
    public var poolMayGrow: Bool {
        switch self {
        case .binary: false
        case .http2: true
        }
    }

    /// What "resent" covers, for the report's note on resends.
    public var resendsExplained: String {
        switch self {
        case .binary:
            "discarded by the gateway after a refusal or shutdown on their connection, refused for the gateway's own trouble "
                + "(status 1, 255, undefined codes: again after a backoff, never final), or unproven when one was lost; "
                + "the gateway confirms nothing, so each connection ends with a proof of acceptance, a notification it must refuse"
        case .http2:
            "requests the server refused unprocessed (REFUSED_STREAM, above a GOAWAY) or asked to retry (429, 500, 503), "
                + "and requests open on a lost connection, which may be duplicates"
        }
    }
}
