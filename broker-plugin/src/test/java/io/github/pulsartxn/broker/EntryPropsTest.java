package io.github.pulsartxn.broker;

import static org.junit.jupiter.api.Assertions.assertThrows;

import io.netty.buffer.ByteBuf;
import io.netty.buffer.Unpooled;
import java.util.function.Supplier;
import org.apache.bookkeeper.mledger.Entry;
import org.apache.bookkeeper.mledger.Position;
import org.apache.bookkeeper.mledger.PositionFactory;
import org.apache.pulsar.common.api.proto.MessageMetadata;
import org.junit.jupiter.api.Test;

/** What an entry that cannot be decoded means: REJECT only when the bytes are at fault. */
class EntryPropsTest {

    /** An entry at 1:1 whose data buffer is what {@code data} gives (or throws). */
    private static Entry entryOf(Supplier<ByteBuf> data) {
        return new Entry() {
            public byte[] getData() {
                return new byte[0];
            }

            public byte[] getDataAndRelease() {
                return new byte[0];
            }

            public int getLength() {
                return 0;
            }

            public ByteBuf getDataBuffer() {
                return data.get();
            }

            public Position getPosition() {
                return PositionFactory.create(1, 1);
            }

            public long getLedgerId() {
                return 1;
            }

            public long getEntryId() {
                return 1;
            }

            public boolean release() {
                return true;
            }
        };
    }

    private static MessageMetadata batchOf(int n) {
        MessageMetadata md = new MessageMetadata();
        md.setProducerName("p").setSequenceId(0).setPublishTime(1).setNumMessagesInBatch(n);
        return md;
    }

    @Test
    void theBrokersOwnOutOfMemoryIsNotTakenForAnUndecodableEntry() {
        // REJECT is permanent: an entry rejected for the broker's own memory would be lost
        // to the subscription; the error goes up (the filter reschedules, holding what follows)
        assertThrows(OutOfMemoryError.class, () -> EntryProps.protocolOf(entryOf(() -> {
            throw new OutOfMemoryError("Direct buffer memory");
        }), batchOf(2)));
    }

    @Test
    void bytesThatDoNotDecodeAreUnreadable() {
        ByteBuf bytes = Unpooled.wrappedBuffer(new byte[] {0, 0, 0, 9, 1, 2});
        Entry garbage = entryOf(() -> bytes);
        assertThrows(EntryProps.Unreadable.class, () -> EntryProps.protocolOf(garbage, batchOf(2)));
    }
}
