import Testing
import APNSWire

/// A plan names how its notifications travel: one of the binary interface's
/// three formats, or HTTP/2, which is no binary format.
@Suite struct WireProtocolTests {
    @Test func namesRoundTripAndHTTP2IsNotABinaryFormat() {
        for wire in WireProtocol.allCases { #expect(WireProtocol(name: wire.description) == wire) }
        #expect(WireProtocol(name: "h2") == .http2 && WireProtocol(name: "H2") == .http2)
        #expect(WireProtocol(name: "frame") == .binary(.frame))
        #expect(WireProtocol(name: "http2") == nil && WireProtocol(name: "") == nil)
        #expect(NotificationFormat(name: "h2") == nil, "h2 is not a command of the binary interface")
        #expect(WireProtocol.http2.binaryFormat == nil && WireProtocol.binary(.enhanced).binaryFormat == .enhanced)
    }

    @Test func limitsAreThoseOfTheGuideThatDefinesEach() {
        #expect(WireProtocol.binary(.simple).maxPayloadBytes == 256 && WireProtocol.binary(.enhanced).maxTokenBytes == 32)
        #expect(WireProtocol.binary(.frame).maxPayloadBytes == 2048 && WireProtocol.binary(.frame).maxTokenBytes == 100)
        #expect(WireProtocol.http2.maxPayloadBytes == 5120 && WireProtocol.http2.maxTokenBytes == 100)
        #expect(WireProtocol.allCases.filter(\.carriesPriority) == [.binary(.frame), .http2])
    }
}
