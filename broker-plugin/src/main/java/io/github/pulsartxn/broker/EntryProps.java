package io.github.pulsartxn.broker;

import io.netty.buffer.ByteBuf;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.pulsar.common.api.proto.CompressionType;
import org.apache.pulsar.common.api.proto.KeyValue;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.apache.pulsar.common.api.proto.SingleMessageMetadata;
import org.apache.pulsar.common.compression.CompressionCodecProvider;
import org.apache.pulsar.common.protocol.Commands;

/**
 * The properties of each message of an entry. pulsar-client (C++, so Python) keeps a
 * batch's properties only inside the (possibly compressed) payload, per message, so a
 * batched entry is decoded here; an encrypted batch cannot be and raises.
 */
final class EntryProps {
    private EntryProps() {
    }

    /** Never more than this decompressed: a producer chooses the size it claims. */
    static final int MAX_UNCOMPRESSED = 64 << 20;

    static List<Map<String, String>> of(Entry entry, MessageMetadata md) throws IOException {
        try {
            return read(entry, md);
        } catch (Unreadable e) {
            throw e;
        } catch (Throwable e) { // corrupt or hostile bytes: they never become readable
            throw new Unreadable("the entry does not decode: " + e);
        }
    }

    private static List<Map<String, String>> read(Entry entry, MessageMetadata md) throws IOException {
        if (!md.hasNumMessagesInBatch()) {
            return List.of(props(md.getPropertiesList()));
        }
        if (md.getEncryptionKeysCount() > 0) {
            throw new Unreadable("an encrypted batch: its properties cannot be read");
        }
        ByteBuf buf = entry.getDataBuffer().duplicate();
        Commands.skipBrokerEntryMetadataIfExist(buf);
        Commands.skipMessageMetadata(buf);
        ByteBuf payload = buf;
        boolean decoded = md.getCompression() != CompressionType.NONE;
        if (decoded && (md.getUncompressedSize() < 0 || md.getUncompressedSize() > MAX_UNCOMPRESSED)) {
            throw new Unreadable("a batch claiming " + md.getUncompressedSize() + " bytes uncompressed");
        }
        if (md.getNumMessagesInBatch() < 1 || md.getNumMessagesInBatch() > 1_000_000) {
            throw new Unreadable("a batch of " + md.getNumMessagesInBatch() + " messages");
        }
        if (decoded) {
            payload = CompressionCodecProvider.getCompressionCodec(md.getCompression())
                    .decode(buf, md.getUncompressedSize());
        }
        try {
            int n = md.getNumMessagesInBatch();
            List<Map<String, String>> out = new ArrayList<>(n);
            for (int i = 0; i < n; i++) {
                SingleMessageMetadata smm = new SingleMessageMetadata();
                ByteBuf single = Commands.deSerializeSingleMessageInBatch(payload, smm, i, n);
                single.release();
                out.add(props(smm.getPropertiesList()));
            }
            return out;
        } finally {
            if (decoded) {
                payload.release();
            }
        }
    }

    /** An entry whose properties can never be read here: never delivered. */
    static final class Unreadable extends IOException {
        private static final long serialVersionUID = 1L;

        Unreadable(String why) {
            super(why);
        }
    }

    private static Map<String, String> props(List<KeyValue> kvs) {
        Map<String, String> out = new HashMap<>();
        for (KeyValue kv : kvs) {
            out.put(kv.getKey(), kv.getValue());
        }
        return out;
    }
}
