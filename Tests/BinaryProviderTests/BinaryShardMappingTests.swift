import Testing
@testable import BinaryProvider

/// Which connection sends a binary plan's shard.
@Suite struct BinaryShardMappingTests {
    @Test func binaryShardsOfAPartAreSpreadOverEveryConnection() {
        // Part k of 4 holds shards k, k+4, k+8, …: each part's shards reach all 4 connections.
        for part in 0..<4 {
            let shards = stride(from: part, to: 32, by: 4)
            #expect(Set(shards.map { BinaryTransport.connection(forShard: $0, parts: 4, connections: 4) }) == [0, 1, 2, 3])
            #expect(Set(shards.map { BinaryTransport.connection(forShard: $0, parts: 4, connections: 2) }) == [0, 1])
        }
        // A whole plan: shard by shard, round the connections.
        #expect((0..<8).map { BinaryTransport.connection(forShard: $0, parts: 1, connections: 4) } == [0, 1, 2, 3, 0, 1, 2, 3])
    }
}
