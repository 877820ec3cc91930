package io.github.pulsartxn.broker;

import io.netty.buffer.ByteBuf;
import java.io.IOException;
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

    private static final String[] PROTOCOL = {EntryTxn.PROP_TXN, EntryTxn.PROP_WRITER, EntryTxn.PROP_DEPLOYMENT};

    /**
     * The protocol properties (only those) the entry's messages share; throws
     * {@link Unreadable} if they differ (a mixed batch: never pulsar-txn's) or the entry
     * does not decode. Each message's metadata is parsed in place: no slice, no map.
     */
    static Map<String, String> protocolOf(Entry entry, MessageMetadata md) throws IOException {
        try {
            return read(entry, md);
        } catch (Unreadable e) {
            throw e;
        } catch (OutOfMemoryError e) {
            throw e; // the broker's own memory, not the bytes: never a (permanent) REJECT
        } catch (Throwable e) { // corrupt or hostile bytes: they never become readable
            throw new Unreadable("the entry does not decode: " + e);
        }
    }

    private static Map<String, String> read(Entry entry, MessageMetadata md) throws IOException {
        if (!md.hasNumMessagesInBatch()) {
            return protocol(md.getPropertiesList());
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
        int n = md.getNumMessagesInBatch();
        if (n < 1 || n > 1_000_000) {
            throw new Unreadable("a batch of " + n + " messages");
        }
        if (decoded) {
            payload = CompressionCodecProvider.getCompressionCodec(md.getCompression())
                    .decode(buf, md.getUncompressedSize());
        }
        try {
            SingleMessageMetadata smm = new SingleMessageMetadata();
            Map<String, String> first = null;
            for (int i = 0; i < n; i++) {
                int size = payload.readInt();
                smm.parseFrom(payload, size);
                payload.skipBytes(smm.getPayloadSize());
                Map<String, String> props = protocol(smm.getPropertiesList());
                if (first == null) {
                    first = props;
                } else if (!first.equals(props)) {
                    throw new Unreadable("a batch whose messages differ in the protocol properties");
                }
            }
            return first;
        } finally {
            if (decoded) {
                payload.release();
            }
        }
    }

    private static Map<String, String> protocol(List<KeyValue> kvs) {
        Map<String, String> out = null;
        for (KeyValue kv : kvs) {
            String k = kv.getKey();
            if (k.startsWith("__ptxn.")) {
                for (String p : PROTOCOL) {
                    if (p.equals(k)) {
                        if (out == null) {
                            out = new HashMap<>(4);
                        }
                        out.put(k, kv.getValue());
                    }
                }
            }
        }
        return out == null ? Map.of() : out;
    }

    /** An entry whose properties can never be read here: never delivered. */
    static final class Unreadable extends IOException {
        private static final long serialVersionUID = 1L;

        Unreadable(String why) {
            super(why);
        }
    }

}
