import Testing
@testable import BinaryProvider

/// A binary plan's connection tells an HTTP/2 server's first frame from a gateway's answer.
@Suite struct HTTP2PeerTests {
    @Test func anHTTP2ServersFirstFrameIsToldFromAnErrorResponse() {
        // What nghttp2 sends first as a server: SETTINGS with MAX_CONCURRENT_STREAMS 100, INITIAL_WINDOW_SIZE 65,535.
        let settings: [UInt8] = [0, 0, 12, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100, 0, 4, 0, 0, 0xFF, 0xFF]
        #expect(ConnectionWorker.isHTTP2Settings(settings[...]))
        #expect(ConnectionWorker.isHTTP2Settings([0, 0, 0, 4, 0, 0, 0, 0, 0][...]), "an empty SETTINGS")
        #expect(!ConnectionWorker.isHTTP2Settings([8, 8, 0, 0, 0, 1][...]), "an error response")
        #expect(!ConnectionWorker.isHTTP2Settings([0, 0, 0, 4, 1, 0, 0, 0, 0][...]), "a SETTINGS acknowledgement is never first")
        #expect(!ConnectionWorker.isHTTP2Settings([0, 0, 12, 4, 0, 0, 0, 0, 1][...]), "SETTINGS only on stream 0")
        #expect(!ConnectionWorker.isHTTP2Settings(Array("HTTP/1.1 400 Bad Request".utf8)[...]))
        #expect(!ConnectionWorker.isHTTP2Settings(settings.prefix(8)), "too short to tell")
    }
}
