/* placeholder */ typedef int tr_placeholder_nccl_select;
