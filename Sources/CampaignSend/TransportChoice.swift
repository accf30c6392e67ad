import PlanStream
import SendJournal
import SendEngine
import H2Provider
import BinaryProvider

/// The one place a plan's protocol picks the transport that carries it: a
/// new protocol adds its case here, and the sender runs whatever comes back.
func makeTransport(for header: PlanHeader, settings: SendSettings, journalDirectory: String) throws -> any NotificationTransport {
    switch header.wire {
    case .binary: BinaryTransport(header: header)
    case .http2: try HTTP2Transport(header: header, settings: settings, journal: journalDirectory)
    }
}
